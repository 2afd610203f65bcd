// A small command-line driver for kafkajs (the version package.json pins), used by
// tests/clients/test_interop_node.py against minibroker, as tests/java/MiniClient.java is for Java.
// It uses kafkajs's public API with the settings an application would use.
//
// Usage: node client.js COMMAND ARGS... [-- COMMAND ARGS...]...
// Several commands run one after another in one process, separated by "--".
//
//   create-topic BOOTSTRAP TOPIC PARTITIONS    admin.createTopics
//   produce BOOTSTRAP TOPIC PARTITIONS COUNT [FIRST]
//       records FIRST..FIRST+COUNT-1 (the formula below), record i -> partition i % PARTITIONS, from
//       an idempotent producer (acks=all, one request in flight)
//   group-consume BOOTSTRAP TOPIC GROUP COUNT [read_uncommitted]
//       one member of GROUP (from the earliest offset when nothing is committed) reads COUNT records,
//       commits them, and leaves; kafkajs reads read_committed unless told otherwise
//   group BOOTSTRAP TOPIC GROUP MEMBERS PARTITIONS COUNT
//       MEMBERS consumers join GROUP; once every partition is assigned to one of them, COUNT records
//       are produced and consumed by the group, each member committing what it read
//   txn-produce BOOTSTRAP TOPIC TXN_ID PLAN
//       transactions to partition 0 by PLAN, e.g. "commit:3,abort:2": record k of transaction t has
//       key "t<t>-<k>" and value "<outcome>-<t>-<k>"
//   describe-group BOOTSTRAP GROUP TOPIC       admin.describeGroups and fetchOffsets
//
// Output: one JSON object per line on stdout, {"type": ...}; bytes are hex strings, null as null;
// {"type": "done", "command": ...} after each command. A failure prints {"type": "error"} and exits 1.
// Record i of `produce` is MiniClient's: key "key-<i>", value of length (i * 7919) % 301 with byte
// j = (i * 131 + j * 29 + (j >> 3)) & 0xff, headers ("trace", "<i>"), ("origin", the 4 big-endian
// bytes of (i * 2654435761) mod 2^32).
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const TIMEOUT_MS = 90000;
const emit = (fields) => process.stdout.write(JSON.stringify(fields) + '\n');
const hex = (b) => (b === null || b === undefined ? null : Buffer.from(b).toString('hex'));

function kafka(bootstrap) {
  return new Kafka({
    clientId: 'mb-kafkajs',
    brokers: [bootstrap],
    logLevel: logLevel.ERROR,
    // kafkajs's errors to stderr, which a failing test prints.
    logCreator: () => ({ namespace, log }) => process.stderr.write(`${namespace}: ${log.message} ${log.error || ''}\n`),
    retry: { retries: 5, initialRetryTime: 100 },
  });
}

function testRecord(i) {
  const value = Buffer.alloc((i * 7919) % 301);
  for (let j = 0; j < value.length; j++) value[j] = (i * 131 + j * 29 + (j >> 3)) & 0xff;
  const origin = Buffer.alloc(4);
  origin.writeUInt32BE(Number((BigInt(i) * 2654435761n) % 4294967296n));
  return { key: Buffer.from(`key-${i}`), value, headers: { trace: Buffer.from(`${i}`), origin } };
}

function emitRecord(topic, partition, message, member) {
  const headers = Object.entries(message.headers || {}).map(([k, v]) => [k, hex(v)]);
  const line = { type: 'record', client: 'kafkajs', topic, partition, offset: Number(message.offset),
    key: hex(message.key), value: hex(message.value), headers };
  if (member !== undefined) line.member = String(member);
  emit(line);
}

function consumer(client, group, options = {}) {
  return client.consumer({ groupId: group, sessionTimeout: 10000, rebalanceTimeout: 10000,
    heartbeatInterval: 500, maxWaitTimeInMs: 200, allowAutoTopicCreation: false, ...options });
}

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result in ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function createTopic(bootstrap, topic, partitions) {
  const admin = kafka(bootstrap).admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({ topics: [{ topic, numPartitions: Number(partitions), replicationFactor: 1 }],
      waitForLeaders: true });
    emit({ type: 'created', topic, partitions: Number(partitions), created });
  } finally {
    await admin.disconnect();
  }
}

async function produceWith(producer, topic, partitions, count, first) {
  const messages = [];
  for (let i = first; i < first + count; i++) messages.push({ ...testRecord(i), partition: i % partitions });
  const results = await producer.send({ topic, messages, acks: -1 });
  for (const r of results) emit({ type: 'produced-batch', partition: r.partition, base_offset: Number(r.baseOffset) });
}

async function produce(bootstrap, topic, partitions, count, first = '0') {
  const producer = kafka(bootstrap).producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    await produceWith(producer, topic, Number(partitions), Number(count), Number(first));
  } finally {
    await producer.disconnect();
  }
}

// Consume COUNT records with one member, commit them, leave.
async function groupConsume(bootstrap, topic, group, count, isolation = 'read_committed') {
  count = Number(count);
  const c = consumer(kafka(bootstrap), group, { readUncommitted: isolation === 'read_uncommitted' });
  await c.connect();
  let seen = 0;
  const next = {}; // partition -> offset after the last record read
  try {
    await c.subscribe({ topic, fromBeginning: true });
    await withTimeout(new Promise((resolve, reject) => {
      c.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (seen === count) return;
          emitRecord(topic, partition, message);
          next[partition] = Number(message.offset) + 1;
          if (++seen === count) resolve();
        },
      }).catch(reject);
    }), `${seen} of ${count} records`);
    await c.commitOffsets(Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition),
      offset: String(offset) })));
    emit({ type: 'committed', offsets: next });
  } finally {
    await c.disconnect(); // leaves the group
  }
}

async function group(bootstrap, topic, groupId, members, partitions, count) {
  members = Number(members); partitions = Number(partitions); count = Number(count);
  const client = kafka(bootstrap);
  const assignment = new Array(members).fill(null);
  const next = Array.from({ length: members }, () => ({}));
  const consumers = [];
  let seen = 0;
  let allRead;
  const read = new Promise((resolve) => { allRead = resolve; });
  try {
    for (let m = 0; m < members; m++) {
      const c = consumer(client, groupId);
      consumers.push(c);
      c.on(c.events.GROUP_JOIN, ({ payload }) => {
        assignment[m] = payload.memberAssignment[topic] || [];
        for (const p of assignment[m]) emit({ type: 'assigned', member: m, partition: p });
      });
      await c.connect();
      await c.subscribe({ topic, fromBeginning: true });
      await c.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          emitRecord(topic, partition, message, m);
          next[m][partition] = Number(message.offset) + 1;
          if (++seen === count) allRead();
        },
      });
    }
    await withTimeout((async () => {
      for (;;) {
        const owned = assignment.filter((a) => a !== null).flat();
        const owners = assignment.filter((a) => a !== null && a.length > 0).length;
        if (new Set(owned).size === partitions && owned.length === partitions
            && owners === Math.min(members, partitions)) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    })(), 'the group did not assign every partition');
    emit({ type: 'stable' });
    const producer = client.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    await produceWith(producer, topic, partitions, count, 0);
    await producer.disconnect();
    await withTimeout(read, `${seen} of ${count} records`);
    for (let m = 0; m < members; m++) {
      await consumers[m].commitOffsets(Object.entries(next[m]).map(([partition, offset]) => ({ topic,
        partition: Number(partition), offset: String(offset) })));
    }
    emit({ type: 'committed' });
  } finally {
    for (const c of consumers) await c.disconnect();
  }
}

async function txnProduce(bootstrap, topic, txnId, plan) {
  const producer = kafka(bootstrap).producer({ transactionalId: txnId, idempotent: true, maxInFlightRequests: 1,
    transactionTimeout: 30000 });
  await producer.connect();
  try {
    const steps = plan.split(',').map((s) => s.split(':'));
    for (const [t, [outcome, n]] of steps.entries()) {
      if (outcome !== 'commit' && outcome !== 'abort') throw new Error(`bad plan step ${outcome}:${n}`);
      const txn = await producer.transaction();
      const messages = [];
      for (let k = 0; k < Number(n); k++) messages.push({ key: `t${t}-${k}`, value: `${outcome}-${t}-${k}`, partition: 0 });
      await txn.send({ topic, messages });
      if (outcome === 'commit') await txn.commit(); else await txn.abort();
      emit({ type: 'txn', index: t, outcome, records: Number(n) });
    }
  } finally {
    await producer.disconnect();
  }
}

async function describeGroup(bootstrap, groupId, topic) {
  const admin = kafka(bootstrap).admin();
  await admin.connect();
  try {
    const { groups } = await admin.describeGroups([groupId]);
    for (const g of groups) {
      emit({ type: 'group', group: g.groupId, state: g.state, protocol_type: g.protocolType, protocol: g.protocol,
        members: g.members.length });
    }
    for (const t of await admin.fetchOffsets({ groupId, topics: [topic] })) {
      for (const p of t.partitions) emit({ type: 'offset', topic: t.topic, partition: p.partition, offset: Number(p.offset) });
    }
  } finally {
    await admin.disconnect();
  }
}

const COMMANDS = {
  'create-topic': createTopic,
  produce,
  'group-consume': groupConsume,
  group,
  'txn-produce': txnProduce,
  'describe-group': describeGroup,
};

async function main() {
  const groups = [[]];
  for (const a of process.argv.slice(2)) {
    if (a === '--') groups.push([]); else groups[groups.length - 1].push(a);
  }
  for (const [name, ...args] of groups) {
    const started = Date.now();
    const command = COMMANDS[name];
    try {
      if (!command) throw new Error(`no command ${name}`);
      await command(...args);
    } catch (err) {
      emit({ type: 'error', command: [name, ...args].join(' '), error: String(err && err.stack || err) });
      process.exit(1);
    }
    emit({ type: 'done', command: name, ms: Date.now() - started });
  }
  process.exit(0);
}

main();
