// kafkajs produces COUNT records to TOPIC, then a consumer of GROUP reads them all and commits.
// Usage: node group_consume.js BOOTSTRAP TOPIC GROUP COUNT
// Prints one JSON line: {"produced": n, "consumed": [values...], "committed": {partition: offset}}.
// Every wait is bounded; the process exits non-zero on any failure or after TIMEOUT_MS.
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, groupId, countText] = process.argv.slice(2);
const count = Number(countText);
const TIMEOUT_MS = 60000;

const timer = setTimeout(() => {
  console.error(`timed out after ${TIMEOUT_MS} ms`);
  process.exit(2);
}, TIMEOUT_MS);

async function main() {
  const kafka = new Kafka({
    clientId: "kraftpy-kafkajs",
    brokers: bootstrap.split(","),
    logLevel: logLevel.ERROR,
    retry: { retries: 10 },
  });
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < count; i++) messages.push({ key: `k${i}`, value: `v${i}` });
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const consumed = [];
  const next = {}; // partition -> the offset after the last record consumed there
  await new Promise((resolve, reject) => {
    consumer
      .run({
        autoCommit: true,
        eachMessage: async ({ partition, message }) => {
          consumed.push(message.value.toString());
          next[partition] = (BigInt(message.offset) + 1n).toString();
          if (consumed.length >= count) resolve();
        },
      })
      .catch(reject);
  });
  // An explicit commit, which kafkajs retries and fails loudly: the implicit one in stop() is
  // given up quietly when the coordinator is busy (a loaded machine), leaving nothing committed.
  await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition), offset })));
  await consumer.stop();
  await consumer.disconnect();

  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  await admin.disconnect();
  const committed = {};
  for (const p of offsets[0].partitions) committed[p.partition] = Number(p.offset);
  console.log(JSON.stringify({ produced: count, consumed, committed }));
}

main()
  .then(() => {
    clearTimeout(timer);
    process.exit(0);
  })
  .catch((err) => {
    console.error(err && err.stack ? err.stack : String(err));
    process.exit(1);
  });
