// Issue 3 through @pandastack/sdk@0.9.0: the TypeScript snippets of "Persistent sandbox sessions"
// (000_c44f664048d9d288.txt) sections 2 and 3, and the TypeScript calls of "Sandbox lifecycle"
// (003_9a81e070ecbef351.txt). Snippet lines are verbatim and in order; lines marked `// setup:`
// provide what the seed assumes exists, `// check:` lines assert its results. (Seed 003's
// `await using` block is not run: Node 20 has no explicit resource management syntax.)
//
// Fork children die with their parent, so every test kills its children before their parent:
// the shared after-each cleanup deletes what is left in parallel.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, NotFoundError, Sandbox } from "@pandastack/sdk";
import { useServer } from "./helpers.mjs";

useServer();

async function statusOf(id) {
  return (await Sandbox.get(id)).status;
}

async function gone(id) {
  try {
    await Sandbox.get(id);
    return false;
  } catch (e) {
    if (e instanceof NotFoundError) return true;
    throw e;
  }
}

test("000 §2: snapshot, kill, restore with fromSnapshot; the kernel state comes back", async () => {
  const db = new Map(); // setup: "wherever you keep session state"
  const conversationId = `conv-${Date.now()}`; // setup:
  const saveToDb = async (cid, id) => db.set(cid, id); // setup:
  const loadFromDb = async (cid) => db.get(cid); // setup:
  const client = new Client();
  const snaps = [];
  try {
    {
      // setup: section 1, the state section 2 captures
      const sandbox = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 });
      const ctx = await sandbox.createCodeContext(); // persistent kernel
      await ctx.runCode("import pandas as pd; df = pd.DataFrame({'a': [1, 2, 3]})");
      const ex = await ctx.runCode("total = int(df['a'].sum()); total");
      assert.equal(ex.text, "6"); // check:

      // snapshot() returns a SnapshotInfo object in TS — read .id
      const snap = await sandbox.snapshot();
      const snapId = snap.id;
      await saveToDb(conversationId, snapId);
      await sandbox.kill();
      snaps.push(snapId); // check:
      assert.match(snapId, /^snap-[0-9a-f]+$/); // check:
      assert.equal(snap.sandbox_id, sandbox.id); // check:
      assert.ok(await gone(sandbox.id)); // check:
    }
    {
      const snapId = await loadFromDb(conversationId);
      const sandbox = await Sandbox.create({ fromSnapshot: snapId });
      const ctx = await sandbox.createCodeContext(); // new handle; kernel state survived
      const out = await ctx.runCode("print(total)"); // check: (the seed logs .text of this call)
      console.log(out.text); // -> "6"
      assert.equal(out.error ?? null, null); // check:
      assert.equal(out.text, "6"); // check:
      // check: TS sent template "ubuntu-24.04" with fromSnapshot; the snapshot decides
      assert.equal(sandbox.template, "code-interpreter");
      assert.equal(sandbox.info.from_snapshot, snapId);
      assert.equal((await ctx.runCode("df['a'].tolist()")).text, "[1, 2, 3]"); // check:
    }
  } finally {
    for (const id of snaps) await client.snapshots.delete(id);
  }
});

test("000 §3: forkTree({count: 3}) children run code on the warm DataFrame", async () => {
  const warm = await Sandbox.create({ template: "code-interpreter", ttlSeconds: 3600 });
  const rows = ["a,b"]; // setup: the dataset the seed reads
  for (let i = 0; i < 5000; i++) rows.push(`${i % 7},${i}`);
  await warm.filesystem.write("/data/big.csv", rows.join("\n") + "\n"); // setup:
  const ctx = await warm.createCodeContext();
  await ctx.runCode("import pandas as pd; df = pd.read_csv('/data/big.csv')");
  const expected = (await ctx.runCode("df['a'].mean()")).text; // check: the parent's answer
  assert.ok(Math.abs(parseFloat(expected.replace(/^np\.float64\((.*)\)$/, "$1")) - 2.999) < 1e-9, expected);
  assert.equal((await warm.exec("rm /data/big.csv")).exitCode, 0); // setup: no re-read possible

  const branches = await warm.forkTree({ count: 3, metadata: { strategy: "tree-of-thought" } });
  try {
    assert.equal(branches.length, 3); // check:
    assert.equal(new Set(branches.map((b) => b.id).concat([warm.id])).size, 4); // check:
    const bctxs = [];
    for (const sb of branches) {
      const bctx = await sb.createCodeContext();
      bctxs.push(bctx); // check:
      const out = await bctx.runCode("df['a'].mean()"); // check: (the seed logs .text of this call)
      console.log(out.text);
      assert.equal(out.text, expected); // check:
      const md = (await Sandbox.get(sb.id)).info.metadata; // check:
      assert.equal(md.parent_id, warm.id);
      assert.equal(md.strategy, "tree-of-thought");
      assert.equal(md.fork_tree_id, branches[0].info.metadata.fork_tree_id);
    }
    // check: children are independent (a change in one is not in a sibling or the parent)
    assert.equal((await bctxs[0].runCode("df['a'] += 100; int(df['a'].sum())")).text, String(14995 + 500000));
    assert.equal((await bctxs[1].runCode("int(df['a'].sum())")).text, "14995");
    assert.equal((await ctx.runCode("int(df['a'].sum())")).text, "14995");
  } finally {
    for (const sb of branches) await sb.kill();
  }
  assert.equal(await statusOf(warm.id), "running"); // check: the parent is untouched
});

test("003: the lifecycle calls of the TypeScript SDK", async () => {
  const client = new Client();
  const sandbox = await Sandbox.create({
    template: "code-interpreter",
    ttlSeconds: 3600,
    metadata: { job: "demo" },
  });
  // check: "The returned object includes id, boot_ms, boot_mode, guest_ip, and any metadata"
  assert.deepEqual(sandbox.info.metadata, { job: "demo" });
  assert.match(sandbox.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  assert.ok(["snapshot", "cold"].includes(sandbox.info.boot_mode), sandbox.info.boot_mode);
  assert.equal(typeof sandbox.info.boot_ms, "number");
  assert.ok("guest_ip" in sandbox.info);
  const ctx = await sandbox.createCodeContext(); // setup: state every transition must keep
  assert.equal((await ctx.runCode("counter = 41; counter")).text, "41");

  await sandbox.pause();
  // ...wait for user input...
  assert.equal(await statusOf(sandbox.id), "paused"); // check:
  await sandbox.resume();
  assert.equal(await statusOf(sandbox.id), "running"); // check:
  assert.equal((await ctx.runCode("counter += 1; counter")).text, "42"); // check:

  await sandbox.hibernate();
  // ...minutes or hours later...
  assert.equal(await statusOf(sandbox.id), "hibernated"); // check:
  await sandbox.wake();
  assert.equal(await statusOf(sandbox.id), "running"); // check:
  assert.equal((await ctx.runCode("counter")).text, "42"); // check: RAM intact

  await sandbox.setTtl(7200);
  await sandbox.setPersistent(true);
  console.log(await sandbox.lifecycle());
  const lc = await sandbox.lifecycle(); // check:
  assert.deepEqual(Object.keys(lc).sort(), ["idle_seconds", "persistent", "ttl_seconds"]);
  assert.equal(lc.ttl_seconds, 7200);
  assert.equal(lc.persistent, true);
  assert.ok(Number.isInteger(lc.idle_seconds) && lc.idle_seconds >= 0 && lc.idle_seconds < 10, lc);

  const child = await sandbox.fork({ metadata: { branch: "feature-x" } });
  const fanout = await sandbox.forkTree({ count: 8, metadata: { batch: "search" } });
  try {
    const md = (await Sandbox.get(child.id)).info.metadata; // check:
    assert.equal(md.branch, "feature-x");
    assert.equal(md.parent_id, sandbox.id);
    assert.equal(fanout.length, 8); // check:
    assert.equal(new Set(fanout.map((c) => c.id).concat([child.id, sandbox.id])).size, 10);
    const outs = await Promise.all([child, ...fanout].map((c) => c.exec("echo up")));
    assert.deepEqual(outs.map((o) => o.stdout), Array(9).fill("up\n")); // check: all answer
    for (const c of fanout) assert.equal((await Sandbox.get(c.id)).info.metadata.batch, "search");

    const snap = await sandbox.snapshot();
    // → { id: "snap-…", sandbox_id, created_at, mem_path, state_path }
    try {
      assert.match(snap.id, /^snap-[0-9a-f]+$/); // check:
      assert.equal(snap.sandbox_id, sandbox.id); // check:
      assert.ok(snap.created_at, JSON.stringify(snap)); // check:
      const listed = await client.snapshots.list({ sandbox_id: sandbox.id });
      assert.deepEqual(listed.map((s) => s.id), [snap.id]);
    } finally {
      await client.snapshots.delete(snap.id);
    }
    assert.ok(!(await client.snapshots.list()).some((s) => s.id === snap.id));
  } finally {
    for (const c of [child, ...fanout]) await c.kill();
  }
  await sandbox.kill();
  assert.ok(await gone(sandbox.id));
});
