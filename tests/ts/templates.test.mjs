// Issue 13 through the published TypeScript SDK (@pandastack/sdk@0.9.0): buildFromDockerfile
// (always multipart, context as a path -> contents map), buildLogs followed to `event: done`,
// buildStatus, a sandbox from the built template, delete. The template is removed afterwards
// so the server's template list is as it was.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, NotFoundError, Sandbox } from "@pandastack/sdk";
import { useServer } from "./helpers.mjs";

useServer();

test("buildFromDockerfile with a context, logs followed live, sandbox from the template", async () => {
  const client = new Client();
  const name = `ts-built-${process.pid}`;
  try {
    const build = await client.templates.buildFromDockerfile({
      name,
      dockerfile: "FROM base\nENV FROM_TS=yes\nCOPY greet.txt /srv/greet.txt\nCOPY bin/hello.sh /usr/local/bin/hello\nRUN cat /srv/greet.txt && hello\n",
      context: { "greet.txt": "hello from ts\n", "bin/hello.sh": "#!/bin/sh\necho hello ran\n" },
      cpu: 1,
      memoryMb: 512,
    });
    assert.ok(["queued", "running"].includes(build.status), JSON.stringify(build));
    const lines = [];
    for await (const line of client.templates.buildLogs(build.id)) lines.push(line);
    assert.ok(lines.includes("hello from ts"), lines.join("\n"));
    assert.ok(lines.includes("hello ran"), lines.join("\n"));
    assert.ok(!lines.includes("end"), "the end marker is not a log line");
    const done = await client.templates.buildStatus(build.id);
    assert.equal(done.status, "done", done.error);
    assert.ok((await client.templates.builds()).some((b) => b.id === build.id));
    const tpl = await client.templates.get(name);
    assert.equal(tpl.is_global, false);
    assert.ok((await client.templates.list()).some((t) => t.name === name));

    const sandbox = await Sandbox.create({ template: name });
    assert.equal(sandbox.info.boot_mode, "snapshot");
    const r = await sandbox.exec("cat /srv/greet.txt; echo $FROM_TS; hello");
    assert.equal(r.stdout, "hello from ts\nyes\nhello ran\n");
  } finally {
    await client.templates.delete(name).catch(() => {});
  }
  await assert.rejects(client.templates.get(name), NotFoundError);
});
