// exec and execStream through @pandastack/sdk@0.9.0: exit codes, streaming order, errors.

import assert from "node:assert/strict";
import { test } from "node:test";
import { CommandError, NotFoundError, Sandbox } from "@pandastack/sdk";
import { useServer } from "./helpers.mjs";

useServer();

test("exit codes and captured streams", async () => {
  const sb = await Sandbox.create({ template: "base" });
  const r = await sb.exec("echo out; echo err >&2; exit 7");
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.exitCode, 7);
  assert.equal(r.exit_code, 7);
  await assert.rejects(sb.exec("exit 3", { check: true }), (e) => e instanceof CommandError && e.exitCode === 3);
  assert.equal((await sb.runCode("echo shell default")).stdout, "shell default\n");
});

test("execStream delivers output while the command runs, then its exit code", async () => {
  const sb = await Sandbox.create({ template: "base" });
  const seen = [];
  const start = Date.now();
  const code = await sb.execStream("for i in 1 2 3; do echo $i; sleep 1; done", {
    onStdout: (chunk) => seen.push([Date.now() - start, chunk]),
  });
  assert.equal(code, 0);
  assert.equal(seen.map(([, c]) => c).join(""), "1\n2\n3\n");
  const t1 = seen.find(([, c]) => c.includes("1"))[0];
  const t3 = seen.find(([, c]) => c.includes("3"))[0];
  assert.ok(t3 - t1 > 1500, `"1" at ${t1} ms, "3" at ${t3} ms: not streamed`);

  const err = [];
  assert.equal(await sb.execStream("echo oops >&2; exit 7", { onStderr: (c) => err.push(c) }), 7);
  assert.equal(err.join(""), "oops\n");
});

test("a sandbox of nobody is a NotFoundError", async () => {
  await assert.rejects(Sandbox.get("6b4c1efb-4857-4263-b8ec-000000000000"), NotFoundError);
});
