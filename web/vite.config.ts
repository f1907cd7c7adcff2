// Builds the UI into dist/, which the server embeds. Hashed file names let the
// server cache assets forever; index.html is served with no-cache.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

export default defineConfig({
  plugins: [react()],
  // `@/` is src/: code outside a folder is imported by its place in src.
  resolve: { alias: { "@": fileURLToPath(new URL("./src", import.meta.url)) } },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 800,
    rollupOptions: {
      output: {
        manualChunks(id) {
          if (id.includes("node_modules/@xterm")) return "xterm";
          if (id.includes("node_modules/react-markdown") || id.includes("node_modules/micromark") || id.includes("node_modules/mdast") || id.includes("node_modules/hast") || id.includes("node_modules/unified") || id.includes("node_modules/remark")) return "markdown";
          return undefined;
        },
      },
    },
  },
  server: {
    proxy: {
      "/api": { target: process.env.SHEPHERD_SERVER ?? "http://127.0.0.1:7700", changeOrigin: false },
      "/ws": { target: process.env.SHEPHERD_SERVER ?? "http://127.0.0.1:7700", ws: true },
    },
  },
});
