// Databases (issue 10) through @pandastack/sdk@0.9.0: client.databases create (which polls
// until running), get, list (no credentials), connection, resetCredentials, clone, update,
// wake, delete; a sandbox of the workspace reaches the database with psql.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Client, NotFoundError, BadRequestError, Sandbox } from "@pandastack/sdk";
import { useServer } from "./helpers.mjs";

useServer();

const made = [];
after(async () => {
  const c = new Client();
  for (const id of made) {
    try {
      await c.databases.delete(id);
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }
});

const psql = (url, sql) => `psql '${url}' -v ON_ERROR_STOP=1 -At -c "${sql}"`;

test("create, use from a sandbox, list, reset credentials, clone, delete", async () => {
  const c = new Client();
  const db = await c.databases.create({ label: "ts-notes", size: "1g" });
  made.push(db.id);
  assert.equal(db.status, "running");
  assert.match(db.connection_url, /^postgres:\/\/ts_notes_owner:[A-Za-z0-9]{24}@10\.0\.2\.2:\d+\/ts_notes$/);
  assert.equal(typeof db.created_at, "number");
  assert.equal((await c.databases.connection(db.id)).connection_url, db.connection_url);

  const sb = await Sandbox.create({ template: "base" });
  let r = await sb.exec(psql(db.connection_url, "CREATE TABLE notes (t text); INSERT INTO notes VALUES ('from ts'); SELECT t FROM notes"));
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout.trim().split("\n").at(-1), "from ts");

  const listed = (await c.databases.list()).find((d) => d.id === db.id);
  assert.ok(listed, "listed");
  assert.equal(listed.password, undefined);
  assert.equal(listed.connection_url, undefined);

  const fresh = await c.databases.resetCredentials(db.id);
  assert.notEqual(fresh.password, db.password);
  r = await sb.exec(psql(db.connection_url, "SELECT 1"));
  assert.notEqual(r.exitCode, 0, "the old password still works");
  r = await sb.exec(psql(fresh.connection_url, "SELECT t FROM notes"));
  assert.equal(r.stdout.trim(), "from ts", r.stderr);

  const copy = await c.databases.clone(db.id, { label: "ts-notes-copy" });
  made.push(copy.id);
  assert.equal(copy.cloned_from, db.id);
  r = await sb.exec(psql(copy.connection_url, "SELECT count(*) FROM notes"));
  assert.equal(r.stdout.trim(), "1", r.stderr);

  const on = await c.databases.update(db.id, { always_on: true });
  assert.equal(on.always_on, true);
  const woke = await c.databases.wake(db.id);
  assert.equal(woke.status, "running");

  await assert.rejects(c.databases.clone(db.id, { target_time: "2026-01-01T00:00:00Z" }), (e) => {
    assert.ok(e instanceof BadRequestError, String(e));
    assert.match(e.message, /target_time is not supported/);
    return true;
  });

  for (const id of [copy.id, db.id]) {
    await c.databases.delete(id);
    await assert.rejects(c.databases.get(id), NotFoundError);
  }
  await sb.kill();
});
