// Lint rules for the UI's TypeScript, and the boundaries between its folders
// (ARCHITECTURE.md, "web/"):
//   - code outside a file's own folder is imported by its place in src
//     (`@/…`), never by climbing out of the folder (`../`);
//   - shared folders (api, auth, components, events) import no feature
//     and not the app;
//   - a feature imports no other feature and not the app: what two features
//     need goes to a shared folder;
//   - only query modules (src/api, features/*/api) and the event stream's
//     reader talk to the server; a feature's components use its api/ hooks.
import { readdirSync } from "node:fs";
import { defineConfig, globalIgnores } from "eslint/config";
import js from "@eslint/js";
import tseslint from "typescript-eslint";

const TS = ["**/*.{ts,tsx}"];
const SHARED = ["src/api/**", "src/auth/**", "src/components/**", "src/events/**"];
/** The files that may reach the server. */
const API_MODULES = ["src/api/**", "src/features/*/api/**", "src/events/connection.ts"];

const FEATURES = readdirSync(new URL("./src/features", import.meta.url), { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name);

const NO_PARENT = {
  regex: "^\\.\\./",
  message: "Import what lies outside this folder by its place in src (`@/…`).",
};
const NO_APP = { regex: "^@/app/", message: "Only main.tsx and src/app import the app." };

/** `no-restricted-imports` for one set of files: NO_PARENT and `patterns`. */
function boundary(files, patterns) {
  return { files, rules: { "no-restricted-imports": ["error", { patterns: [NO_PARENT, ...patterns] }] } };
}

const sharedBoundary = boundary(SHARED, [
  { regex: "^@/features/", message: "Shared code imports no feature: move what it needs here instead." },
  NO_APP,
]);

const featureBoundaries = FEATURES.map((feature) =>
  boundary(
    [`src/features/${feature}/**`],
    [
      {
        regex: `^@/features/(?!${feature}/)`,
        message: `features/${feature} imports no other feature: move what both need to src/components or src/api.`,
      },
      NO_APP,
    ],
  ),
);

const CLIENT = {
  name: "@/api/client",
  message: "Only query modules call the server: add a hook to src/api or the feature's api/.",
};
const SERVER_GLOBALS = ["fetch", "WebSocket", "EventSource", "XMLHttpRequest"].map((name) => ({
  name,
  message: "Only query modules call the server: add a hook to src/api or the feature's api/.",
}));

export default defineConfig(
  // The .mjs scripts and tests are not linted; the schema is generated.
  globalIgnores(["dist/", "e2e/", "scripts/", "src/api/schema.d.ts"]),
  {
    files: TS,
    extends: [js.configs.recommended, tseslint.configs.recommended],
    // Dropping a prop by destructuring it beside `...rest` is a use.
    rules: { "@typescript-eslint/no-unused-vars": ["error", { ignoreRestSiblings: true }] },
  },
  boundary(["src/main.tsx", "src/app/**"], []),
  sharedBoundary,
  ...featureBoundaries,
  {
    files: ["src/**"],
    ignores: API_MODULES,
    rules: {
      "no-restricted-globals": ["error", ...SERVER_GLOBALS],
      "@typescript-eslint/no-restricted-imports": ["error", { paths: [CLIENT] }],
    },
  },
  {
    files: ["src/features/*/**"],
    ignores: ["src/features/*/api/**"],
    rules: {
      "@typescript-eslint/no-restricted-imports": [
        "error",
        {
          paths: [
            CLIENT,
            {
              name: "@tanstack/react-query",
              allowTypeImports: true,
              message: "A feature's server state lives in its api/ hooks; components call those.",
            },
          ],
        },
      ],
    },
  },
);
