// Fails if the JavaScript that index.html loads up front (its module script
// and the chunks it preloads) exceeds the budget, gzipped.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { join } from "node:path";

const BUDGET = 250 * 1024;
const dist = new URL("../dist/", import.meta.url).pathname;
const html = readFileSync(join(dist, "index.html"), "utf8");
const files = [...html.matchAll(/(?:src|href)="\/(assets\/[^"]+\.js)"/g)].map((m) => m[1]);
let total = 0;
for (const f of files) {
  const size = gzipSync(readFileSync(join(dist, f)), { level: 9 }).length;
  console.log(`${f}: ${(size / 1024).toFixed(1)} KB gzipped`);
  total += size;
}
console.log(`initial JavaScript: ${(total / 1024).toFixed(1)} KB gzipped (budget ${BUDGET / 1024} KB)`);
if (files.length === 0 || total > BUDGET) process.exit(1);
