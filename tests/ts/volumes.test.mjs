// Volumes (issue 9) through @pandastack/sdk@0.9.0: client.volumes.create({name, size_mb}),
// get, list, a Sandbox.create with `volumes` (data at /mnt/{name} outlives the sandbox), the
// one-at-a-time rule (409) and delete refused while attached, then allowed.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { BadRequestError, Client, NotFoundError, Sandbox } from "@pandastack/sdk";
import { useServer } from "./helpers.mjs";

useServer();

const made = [];
after(async () => {
  const c = new Client();
  for (const name of made) {
    try {
      await c.volumes.delete(name);
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }
});

test("create a volume, attach it at create, keep its data, one sandbox at a time", async () => {
  const c = new Client();
  const name = `ts-work-${process.pid}`;
  const vol = await c.volumes.create({ name, size_mb: 256 });
  made.push(name);
  assert.equal(vol.name, name);
  assert.equal(vol.size_mb, 256);
  assert.equal(vol.attached_to, null);
  assert.ok((await c.volumes.list()).some((v) => v.name === name), "listed");

  const a = await Sandbox.create({ template: "base", volumes: [{ name }] });
  let r = await a.exec(`sh -c 'echo from-ts > /mnt/${name}/note && sync && df -m /mnt/${name} | tail -1'`);
  assert.equal(r.exitCode, 0, r.stderr);
  const sizeMb = Number(r.stdout.trim().split(/\s+/)[1]);
  assert.ok(sizeMb > 200 && sizeMb <= 256, `df shows ${sizeMb} MiB`);
  assert.equal((await c.volumes.get(name)).attached_to, a.id);

  // Attached read-write to `a`: a second sandbox is refused (409, naming the holder), and so
  // is a delete.
  await assert.rejects(
    Sandbox.create({ template: "base", volumes: [{ name }] }),
    (e) => e instanceof BadRequestError && e.statusCode === 409 && e.message.includes(a.id),
  );
  await assert.rejects(
    c.volumes.delete(name),
    (e) => e instanceof BadRequestError && e.statusCode === 409,
  );

  await a.kill();
  assert.equal((await c.volumes.get(name)).attached_to, null, "a kill releases the volume");
  const b = await Sandbox.create({ template: "base", volumes: [{ name, read_only: true }] });
  r = await b.exec(`sh -c 'cat /mnt/${name}/note; touch /mnt/${name}/x 2>&1; true'`);
  assert.match(r.stdout, /^from-ts\n/);
  assert.match(r.stdout, /Read-only file system/);
  await b.kill();

  await c.volumes.delete(name);
  await assert.rejects(c.volumes.get(name), NotFoundError);
});
