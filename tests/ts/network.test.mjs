// Sandbox networking (issue 7) through @pandastack/sdk@0.9.0: every sandbox has its own
// guest_ip and the same address inside, reaches the package registry by name, and a server it
// runs is listed by previewUrls() (GET /ports) and answers through the authenticated proxy.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "@pandastack/sdk";
import { useServer } from "./helpers.mjs";

useServer();

test("guest_ip, DNS and egress to the registry", async () => {
  const [a, b] = await Promise.all([Sandbox.create({ template: "base" }), Sandbox.create({ template: "base" })]);
  assert.ok(a.info.guest_ip && b.info.guest_ip && a.info.guest_ip !== b.info.guest_ip, `${a.info.guest_ip} ${b.info.guest_ip}`);
  assert.match((await a.exec("ip -4 -o addr show dev eth0")).stdout, /10\.0\.2\.100\/24/);
  const npm = await a.exec("cd /tmp && npm view is-number@7.0.0 version", { timeoutSeconds: 120 });
  assert.equal(npm.exitCode, 0, npm.stderr);
  assert.equal(npm.stdout.trim(), "7.0.0");
});

test("a server in the sandbox is listed by previewUrls() and reachable through the proxy", async () => {
  const sb = await Sandbox.create({ template: "base" });
  await sb.filesystem.write("/srv/hello.txt", "hello from the sandbox");
  await sb.exec("setsid python3 -m http.server 8000 --bind 0.0.0.0 --directory /srv > /dev/null 2>&1 < /dev/null &");
  let urls = {};
  for (let i = 0; i < 100 && !urls[8000]; i++) {
    urls = await sb.previewUrls();
    if (!urls[8000]) await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(urls[8000]?.includes(`8000-${sb.id}`), JSON.stringify(urls));
  const api = process.env.PANDASTACK_API;
  const proxied = await fetch(`${api}/v1/sandboxes/${sb.id}/proxy/8000/hello.txt`, {
    headers: { Authorization: `Bearer ${process.env.PANDASTACK_API_KEY}` },
  });
  assert.equal(proxied.status, 200);
  assert.equal(await proxied.text(), "hello from the sandbox");
  const anonymous = await fetch(`${api}/v1/sandboxes/${sb.id}/proxy/8000/hello.txt`);
  assert.equal(anonymous.status, 401);
});
