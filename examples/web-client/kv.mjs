// Connect's own clients calling tram's kv service through the gateway:
// connect-node (Connect over HTTP/1.1 and HTTP/2, JSON and protobuf; gRPC)
// and connect-web (what a browser runs: Connect over fetch, GET for the
// side-effect-free Get, and gRPC-Web). The service's types come from the
// descriptor set tram-build wrote, so nothing here is generated.
//
//   node kv.mjs http://127.0.0.1:7000 path/to/file_descriptor_set.bin
//
// Prints one line per case that passed; exits 1 at the first that fails.

import { readFileSync } from "node:fs";
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import * as node from "@connectrpc/connect-node";
import * as web from "@connectrpc/connect-web";

const [baseUrl, fdsPath] = process.argv.slice(2);
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(fdsPath)));
const Kv = registry.getService("kv.Kv");

// Each transport, with the call kinds it carries (fetch sends no request
// streams; connect-node sends them, half-duplex over HTTP/1.1).
const transports = [
  ["connect-node http1.1 json", node.createConnectTransport({ baseUrl, httpVersion: "1.1" }), "all"],
  ["connect-node http1.1 proto", node.createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true }), "all"],
  ["connect-node http2 json", node.createConnectTransport({ baseUrl, httpVersion: "2" }), "all"],
  ["connect-node http2 proto", node.createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true }), "all"],
  ["connect-node grpc", node.createGrpcTransport({ baseUrl }), "all"],
  ["connect-node grpc-web http1.1", node.createGrpcWebTransport({ baseUrl, httpVersion: "1.1" }), "all"],
  ["connect-web json", web.createConnectTransport({ baseUrl }), "server"],
  ["connect-web get", web.createConnectTransport({ baseUrl, useHttpGet: true }), "server"],
  ["connect-web proto", web.createConnectTransport({ baseUrl, useBinaryFormat: true }), "server"],
  ["connect-web grpc-web", web.createGrpcWebTransport({ baseUrl }), "server"],
];

const text = (s) => new TextEncoder().encode(s);
const str = (b) => new TextDecoder().decode(b);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function expectError(code, call, what) {
  try {
    await call();
  } catch (e) {
    const err = ConnectError.from(e);
    check(err.code === code, `${what}: code ${Code[err.code]} (${err.rawMessage}), want ${Code[code]}`);
    return err;
  }
  throw new Error(`${what}: succeeded, want ${Code[code]}`);
}

async function unary(kv, tag) {
  const key = `${tag}/a`;
  await kv.set({ key, value: text("hello") });
  const hit = await kv.get({ key });
  check(hit.found && str(hit.value) === "hello", `get after set: ${JSON.stringify(hit)}`);
  const miss = await kv.get({ key: `${tag}/missing` });
  check(!miss.found, "get of a missing key");
  const gone = await kv.delete({ key });
  check(gone.deleted, "delete");
}

async function errors(kv) {
  const err = await expectError(Code.InvalidArgument, () => kv.get({ key: "" }), "empty key");
  check(err.rawMessage === "empty key", `message: ${err.rawMessage}`);
}

async function serverStream(kv, tag) {
  const prefix = `${tag}/w/`;
  const events = [];
  const watching = (async () => {
    for await (const ev of kv.watch({ prefix }, { timeoutMs: 3000 })) {
      events.push(ev);
      if (events.length === 3) return;
    }
  })();
  // The watch subscribes when its request arrives.
  await sleep(300);
  await kv.set({ key: `${prefix}1`, value: text("one") });
  await kv.set({ key: `${tag}/elsewhere`, value: text("no") });
  await kv.set({ key: `${prefix}2`, value: text("two") });
  await kv.delete({ key: `${prefix}1` });
  await watching;
  const seen = events.map((e) => `${e.key}=${e.deleted ? "deleted" : str(e.value)}`);
  check(
    JSON.stringify(seen) === JSON.stringify([`${prefix}1=one`, `${prefix}2=two`, `${prefix}1=deleted`]),
    `events ${JSON.stringify(seen)}`,
  );
}

async function deadline(kv, tag) {
  await expectError(
    Code.DeadlineExceeded,
    async () => {
      for await (const _ of kv.watch({ prefix: `${tag}/quiet/` }, { timeoutMs: 200 })) {
        // nothing is written under this prefix
      }
    },
    "watch past its deadline",
  );
}

async function clientStream(kv, tag) {
  async function* sets() {
    for (let i = 0; i < 100; i++) yield { key: `${tag}/bulk/${i}`, value: text(`${i}`) };
  }
  const res = await kv.bulkSet(sets());
  check(res.count === 100n, `bulk count ${res.count}`);
  const hit = await kv.get({ key: `${tag}/bulk/99` });
  check(hit.found && str(hit.value) === "99", "bulk-set key readable");
}

async function bidiStream(kv, tag) {
  async function* commands() {
    yield { id: 1n, op: { case: "set", value: { key: `${tag}/s`, value: text("v") } } };
    yield { id: 2n, op: { case: "get", value: { key: `${tag}/s` } } };
    yield { id: 3n, op: { case: "delete", value: { key: `${tag}/s` } } };
    yield { id: 4n, op: { case: "get", value: { key: `${tag}/s` } } };
  }
  const results = [];
  for await (const r of kv.session(commands())) results.push(r);
  const got = results.map((r) => `${r.id}:${r.found}:${str(r.value)}`);
  check(JSON.stringify(got) === JSON.stringify(["1:true:", "2:true:v", "3:true:", "4:false:"]), `session ${JSON.stringify(got)}`);
}

let failed = false;
for (const [name, transport, kinds] of transports) {
  const kv = createClient(Kv, transport);
  const tag = name.replaceAll(" ", "-");
  const cases = [
    ["unary", () => unary(kv, tag)],
    ["error", () => errors(kv)],
    ["server-stream", () => serverStream(kv, tag)],
    ["deadline", () => deadline(kv, tag)],
  ];
  if (kinds === "all") {
    cases.push(["client-stream", () => clientStream(kv, tag)], ["bidi-stream", () => bidiStream(kv, tag)]);
  }
  for (const [what, run] of cases) {
    try {
      await run();
      console.log(`ok ${name}: ${what}`);
    } catch (e) {
      console.log(`FAILED ${name}: ${what}: ${e?.stack ?? e}`);
      failed = true;
    }
  }
}
process.exit(failed ? 1 : 0);
