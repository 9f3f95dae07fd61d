// The TypeScript snippets of the seed documents, run as written with @pandastack/sdk@0.9.0:
// "Code interpreter" (004_a8db76e6bc11f419.txt) and section 1 of "Persistent sandbox sessions"
// (000_c44f664048d9d288.txt). Snippet lines are verbatim and in order; lines marked
// `// setup:` provide files the seed assumes exist, `// check:` lines assert its results.

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { test } from "node:test";
import { Sandbox } from "@pandastack/sdk";
import { assertPng, chdirTemp, useServer } from "./helpers.mjs";

useServer();

function salesCsv(rows) {
  const lines = ["day,region,units,revenue"];
  for (let i = 0; i < rows; i++) lines.push(`${i},${["north", "south", "east"][i % 3]},${i % 17},${100 + i * 3.5}`);
  return lines.join("\n") + "\n";
}

test("004: stateful code context returns a PNG", async () => {
  const sandbox = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 });
  const ctx = await sandbox.createCodeContext();

  await ctx.runCode("x = 41");
  const ex = await ctx.runCode("import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()");
  console.log(ex.png);             // base64 PNG
  assert.equal(ex.error ?? null, null); // check:
  assertPng(ex.png); // check:
  assert.equal((await ctx.runCode("x + 1")).text, "42"); // check: state kept
});

test("004: one-shot exec", async () => {
  const sandbox = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 });
  const result = await sandbox.exec('python -c "print(2 + 2)"', { timeoutSeconds: 30 });
  console.log(result.stdout);  // "4\n"
  assert.equal(result.stdout, "4\n"); // check:
  assert.equal(result.exitCode, 0); // check:
  await sandbox.kill();
});

test("004: run Python code", async () => {
  const sandbox = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 });

  const out = await sandbox.runCode(`
x = 42
y = x * 2
print(x, y)
`, "python");
  console.log(out.stdout);  // "42 84\n"
  assert.equal(out.stdout, "42 84\n"); // check:
});

test("004: file uploads, upload and download helpers", async () => {
  const dir = chdirTemp();
  writeFileSync("./data.csv", salesCsv(300)); // setup: the local file the seed reads
  const sandbox = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 }); // setup: as the seed's earlier snippet

  await sandbox.filesystem.write("/workspace/data.csv", readFileSync("./data.csv", "utf8"));
  const result = await sandbox.runCode(`
import pandas as pd
df = pd.read_csv('/workspace/data.csv')
print(df.describe())
`, "python");
  console.log(result.stdout);
  assert.equal(result.exitCode, 0, result.stderr); // check:
  assert.match(result.stdout, /count\s+300\.0/); // check:

  await sandbox.filesystem.upload("./data.csv", "/workspace/data.csv");
  const made = await sandbox.runCode( // setup: the result file the seed downloads
    "import pandas as pd; pd.read_csv('/workspace/data.csv').groupby('region').sum().to_csv('/workspace/result.csv')",
    "python",
  );
  assert.equal(made.exitCode, 0, made.stderr);
  await sandbox.filesystem.download("/workspace/result.csv", "./result.csv");
  const got = readFileSync(`${dir}/result.csv`, "utf8"); // check:
  assert.match(got, /^region,/);
  assert.match(got, /\nnorth,/);
});

test("000 §1: state across turns, one sandbox, one kernel", async () => {
  const sandbox = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 });
  const ctx = await sandbox.createCodeContext(); // persistent kernel

  await ctx.runCode("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})");
  const ex = await ctx.runCode("total = int(df['a'].sum()); total");
  console.log(ex.text); // -> "6"
  assert.equal(ex.text, "6"); // check:
});
