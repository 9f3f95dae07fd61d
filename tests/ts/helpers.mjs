// Shared setup of the TypeScript end-to-end tests: they run against the server named by
// PANDASTACK_API / PANDASTACK_API_KEY (scripts/test.sh starts one) through the published
// @pandastack/sdk, exactly as a user's code does.

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, before } from "node:test";
import { Client } from "@pandastack/sdk";

export const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** Checks that `b64` is a base64 PNG (magic bytes and a plausible size). */
export function assertPng(b64) {
  assert.ok(typeof b64 === "string" && b64.length > 0, `no PNG: ${b64}`);
  const raw = Buffer.from(b64, "base64");
  assert.deepEqual(raw.subarray(0, 8), PNG_MAGIC);
  assert.ok(raw.length > 1000, `PNG of only ${raw.length} bytes`);
}

/** A fresh temp dir, made the working directory (the seed snippets read ./data.csv). */
export function chdirTemp() {
  const dir = mkdtempSync(join(tmpdir(), "pandastack-ts-"));
  process.chdir(dir);
  return dir;
}

/**
 * Registers the env check and the after-each cleanup: every sandbox that appeared after this
 * file started is deleted (ones that were there before belong to someone else).
 */
export function useServer() {
  const client = () => new Client();
  let existing = new Set();
  before(async () => {
    assert.ok(process.env.PANDASTACK_API, "PANDASTACK_API is not set");
    assert.ok(process.env.PANDASTACK_API_KEY, "PANDASTACK_API_KEY is not set");
    existing = new Set((await client().sandboxes.list()).map((sb) => sb.id));
  });
  afterEach(async () => {
    const c = client();
    const boxes = (await c.sandboxes.list()).filter((sb) => !existing.has(sb.id));
    await Promise.all(boxes.map((sb) => c.sandboxes.delete(sb.id)));
  });
}
