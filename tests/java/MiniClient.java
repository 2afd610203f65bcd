// A small command-line driver for the real Java Kafka client (kafka-clients at the version
// tests/java/pom.xml names), used by tests/clients/test_interop_java.py against minibroker. It uses
// only the public KafkaProducer, KafkaConsumer and Admin APIs, with the settings an application
// would use.
//
// Usage: java -cp 'LIBS/*:CLASSES' MiniClient COMMAND ARGS... [-- COMMAND ARGS...]...
// Several commands may run in one JVM, separated by "--" (JVM start-up is the slow part).
//
//   create-topic BOOTSTRAP TOPIC PARTITIONS [KEY=VALUE[;KEY=VALUE...]]   topic configs, e.g. max.message.bytes
//   create-topics-once BOOTSTRAP PREFIX COUNT PARTITIONS   one createTopics of PREFIX-0..COUNT-1 with
//                                                  retryOnQuotaViolation(false); one outcome line per
//                                                  topic, with a ThrottlingQuotaExceededException's
//                                                  throttleTimeMs
//   produce BOOTSTRAP TOPIC COUNT [COMPRESSION]   idempotent, acks=all, record i -> partition i % n
//   consume BOOTSTRAP TOPIC PARTITIONS COUNT      assign() + seekToBeginning()
//   produce-payloads BOOTSTRAP TOPIC SIZES [KEY=VALUE...]   record i (SIZES: SIZE[*COUNT],... in bytes) is
//                                                  payload(TOPIC/i, its size) with key "key-<i>" to partition
//                                                  i % n; the producer's settings are producerProps' (idempotent,
//                                                  acks=all) overridden by KEY=VALUE (max.request.size,
//                                                  compression.type, linger.ms ...); one produced or failed
//                                                  line per record
//   consume-payloads BOOTSTRAP TOPIC PARTITIONS SIZES [KEY=VALUE...]   assign() + seekToBeginning() until
//                                                  every record of SIZES is read; each is compared byte for
//                                                  byte with the payload it must be: one checked line per
//                                                  record (index, partition, offset, size, match, sha256)
//   consume-isolated BOOTSTRAP TOPIC ISOLATION    partition 0 from the beginning up to endOffsets()
//                                                 (the LSO for read_committed); ISOLATION is
//                                                 read_committed or read_uncommitted
//   describe-producers BOOTSTRAP TOPIC PARTITION  Admin.describeProducers
//   group-consume BOOTSTRAP TOPIC GROUP COUNT [MEMBERS]   subscribe() in a group, commitSync()
//   control URL METHOD PATH [JSON]                  one call of the control endpoint (java.net.http)
//   alter-quota BOOTSTRAP ENTITY_TYPE NAME KEY VALUE      VALUE "remove" removes the key;
//                                                  NAME "<default>" is the default entity;
//                                                  TYPE/NAME may be comma lists (user,client-id)
//   describe-quotas BOOTSTRAP
//   produce-outcome BOOTSTRAP TOPIC COUNT DELIVERY_TIMEOUT_MS [BATCH_SIZE]   one outcome line per send
//   produce-timestamps BOOTSTRAP TOPIC COMPRESSION TS[,TS...]   one record per timestamp to partition 0,
//                                                  in one batch (linger), idempotent
//   offsets-for-times BOOTSTRAP TOPIC TS           KafkaConsumer.offsetsForTimes on partition 0
//   list-offsets BOOTSTRAP TOPIC SPEC              Admin.listOffsets on partition 0; SPEC is earliest,
//                                                  latest, max-timestamp, earliest-local, latest-tiered
//                                                  or a timestamp
//   describe-topic-ids BOOTSTRAP ID[,ID...]        Admin.describeTopics(TopicCollection.ofTopicIds(...))
//   describe-quorum BOOTSTRAP                      Admin.describeMetadataQuorum
//   describe-log-dirs BOOTSTRAP BROKER             Admin.describeLogDirs and describeReplicaLogDirs
//   list-config-resources BOOTSTRAP [TYPE,...]     Admin.listConfigResources (types by name, e.g. TOPIC)
//   list-reassignments BOOTSTRAP                   Admin.listPartitionReassignments
//   alter-reassignment BOOTSTRAP TOPIC PARTITION REPLICAS|cancel [no-rf-change]
//                                                  REPLICAS is a comma list of broker ids
//   elect-leaders BOOTSTRAP preferred|unclean TOPIC:PARTITION[,...]|all
//   alter-log-dir BOOTSTRAP TOPIC PARTITION BROKER DIR   Admin.alterReplicaLogDirs
//   create-partitions BOOTSTRAP TOPIC COUNT [validate-only|ASSIGNMENT]   Admin.createPartitions;
//                                                  ASSIGNMENT: broker ids per new partition, "1;1"
//   describe-topics BOOTSTRAP TOPIC[,TOPIC...] [LIMIT]   Admin.describeTopics by name (DescribeTopicPartitions),
//                                                  LIMIT partitions per response (partitionSizeLimitPerResponse)
//   alter-configs BOOTSTRAP TOPIC|BROKER NAME OP:KEY[=VALUE][;...] [validate-only]
//                                                  Admin.incrementalAlterConfigs; OP is SET, DELETE, APPEND
//                                                  or SUBTRACT
//   describe-configs BOOTSTRAP TOPIC|BROKER NAME [KEY,...]   Admin.describeConfigs with synonyms
//   delete-records BOOTSTRAP TOPIC PARTITION OFFSET       Admin.deleteRecords
//   delete-group-offsets BOOTSTRAP GROUP TOPIC:PARTITION[,...]   Admin.deleteConsumerGroupOffsets
//   alter-scram BOOTSTRAP upsert:USER:MECH:PASSWORD:ITERATIONS|delete:USER:MECH[,...]
//                                                  Admin.alterUserScramCredentials (MECH 256 or 512)
//   describe-scram BOOTSTRAP [USER,...]            Admin.describeUserScramCredentials (all users when none)
//   kip848-group BOOTSTRAP TOPIC GROUP MEMBERS PREFIX FIRST [SECOND]
//                                                  a KIP-848 group (group.protocol=consumer) of MEMBERS
//                                                  consumers, joining one after another; once they share
//                                                  the topic, FIRST records "PREFIX-i" are produced (record
//                                                  i -> partition i % n) and consumed; with SECOND, the
//                                                  last member then leaves, the others take over its
//                                                  partitions, and SECOND more are produced and consumed.
//                                                  Members commitSync after each poll and on revocation.
//                                                  Lines: record, assigned/revoked/lost (with a global
//                                                  sequence number), shared, committed
//   describe-consumer-group BOOTSTRAP GROUP         Admin.describeConsumerGroups
//   list-groups BOOTSTRAP                          Admin.listGroups (each group's type and state)
//   txn-produce BOOTSTRAP TOPIC PARTITIONS TXN_ID PLAN [TIMEOUT_MS]   transactions by PLAN, e.g.
//                                                  "commit:3,abort:2,open:1" (see txnProduce)
//   txn-zombie BOOTSTRAP TOPIC TXN_ID              a producer fenced by a second one with its id
//   list-transactions BOOTSTRAP                    Admin.listTransactions, then describeTransactions
//   consume-isolation BOOTSTRAP TOPIC PARTITIONS read_committed|read_uncommitted   up to the end offsets
//   consume-transform-produce BOOTSTRAP IN OUT GROUP TXN_ID COUNT   the exactly-once loop
//   create-acls BOOTSTRAP SPEC[;SPEC...]           Admin.createAcls; SPEC is TYPE|NAME|PATTERN|PRINCIPAL|HOST|OP|PERM
//                                                  (Kafka's enum names); one acl-created line per binding
//   describe-acls BOOTSTRAP [FILTER]               Admin.describeAcls (FILTER as SPEC, "null" and ANY allowed)
//   delete-acls BOOTSTRAP FILTER[;FILTER...]       Admin.deleteAcls: one acl-deleted line per binding removed
//   produce-check BOOTSTRAP TOPIC [KEY=VALUE...]   one record; its offset or the exception that refused it
//   consume-check BOOTSTRAP TOPIC GROUP            subscribe() and poll until a record or an exception
//   produce-for BOOTSTRAP TOPIC MS                 one record at a time for MS ms: how many acked, the first error
//   share-consume BOOTSTRAP TOPIC GROUP COUNT      a KafkaShareConsumer (KIP-932, explicit acknowledgement) in GROUP
//                                                  accepts every record it gets and commitSyncs after each poll, until
//                                                  COUNT distinct offsets or 60 s: one record line per delivery
//                                                  (partition, offset, delivery_count), one share-commit line per commit
// Every client takes the properties of the file -Dminibroker.client.config names (security.protocol,
// ssl.*, sasl.*): tests/support/java_client.py's `client_config`.
//
// Output: one JSON object per line on stdout, {"type": ...}; bytes are hex strings, null as null.
// payload(LABEL, SIZE) (tests/support/payloads.py computes the same bytes): the SHA-256 digests of the
//   UTF-8 LABEL followed by the 8-byte big-endian block number 0, 1, 2 ..., each repeated 8 times (256
//   bytes a block, so every codec has something to compress), cut to SIZE bytes.
// Record i of `produce` is deterministic (tests/clients/test_interop_java.py computes the same bytes):
//   key "key-<i>", value of length (i * 7919) % 301 with byte j = (i * 131 + j * 29 + (j >> 3)) & 0xff,
//   headers ("trace", "<i>"), ("origin", the 4 big-endian bytes of (i * 2654435761) mod 2^32).

import java.io.BufferedOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class MiniClient {
    static final PrintStream OUT = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false,
            StandardCharsets.UTF_8);
    static final Duration TIMEOUT = Duration.ofSeconds(60);

    /** The client properties of the current run (a properties file's path: -Dminibroker.client.config, or
     *  the first field of a --serve line). */
    static String clientConfig = System.getProperty("minibroker.client.config");

    /** --serve: one JVM for many runs (a test session's). Each stdin line is a run: the client config
     *  file (or nothing), then the arguments, tab-separated ("--" between commands); it ends with an
     *  {"type":"end"} line whose "error" says whether a command threw. EOF ends the JVM. */
    static void serve() throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(
                new java.io.InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] fields = line.split("\t", -1);
            clientConfig = fields[0].isEmpty() ? null : fields[0];
            String error = "null";
            try {
                runAll(Arrays.copyOfRange(fields, 1, fields.length));
            } catch (Throwable t) {
                error = str(t.toString());
                OUT.println("{\"type\":\"error\",\"error\":" + error + "}");
                t.printStackTrace();
            }
            OUT.println("{\"type\":\"end\",\"error\":" + error + "}");
            OUT.flush();
        }
        OUT.flush();
        System.exit(0);
    }

    static void runAll(String[] args) throws Exception {
        List<String> command = new ArrayList<>();
        for (String arg : args) {
            if (arg.equals("--")) {
                run(command);
                command.clear();
            } else {
                command.add(arg);
            }
        }
        if (!command.isEmpty()) run(command);
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("--serve")) {
            serve();
            return;
        }
        int exit = 0;
        try {
            runAll(args);
        } catch (Throwable t) {
            OUT.println("{\"type\":\"error\",\"error\":" + str(t.toString()) + "}");
            OUT.flush();
            t.printStackTrace();
            exit = 1;
        }
        OUT.flush();
        System.exit(exit);  // the clients' threads are closed, but do not wait on any straggler
    }

    static void run(List<String> c) throws Exception {
        long started = System.nanoTime();
        String[] a = c.toArray(new String[0]);
        switch (a[0]) {
            case "create-topic" -> createTopic(a[1], a[2], Integer.parseInt(a[3]), a.length > 4 ? a[4] : "");
            case "create-topics-once" -> createTopicsOnce(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]));
            case "produce" -> produce(a[1], a[2], Integer.parseInt(a[3]), a.length > 4 ? a[4] : "none");
            case "produce-pushing" -> producePushing(a[1], a[2], a[3], Long.parseLong(a[4]));
            case "consume" -> consume(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]));
            case "produce-payloads" -> producePayloads(a[1], a[2], a[3], Arrays.copyOfRange(a, 4, a.length));
            case "consume-payloads" -> consumePayloads(a[1], a[2], Integer.parseInt(a[3]), a[4],
                    Arrays.copyOfRange(a, 5, a.length));
            case "consume-isolated" -> consumeIsolated(a[1], a[2], a[3]);
            case "describe-producers" -> describeProducers(a[1], a[2], Integer.parseInt(a[3]));
            case "group-consume" -> groupConsume(a[1], a[2], a[3], Integer.parseInt(a[4]),
                    a.length > 5 ? Integer.parseInt(a[5]) : 1);
            case "control" -> control(a[1], a[2], a[3], a.length > 4 ? a[4] : "");
            case "alter-quota" -> alterQuota(a[1], a[2], a[3], a[4], a[5]);
            case "produce-outcome" -> produceOutcome(a[1], a[2], Integer.parseInt(a[3]), a[4],
                    a.length > 5 ? a[5] : null);
            case "describe-quotas" -> describeQuotas(a[1]);
            case "produce-timestamps" -> produceTimestamps(a[1], a[2], a[3], a[4]);
            case "offsets-for-times" -> offsetsForTimes(a[1], a[2], Long.parseLong(a[3]));
            case "list-offsets" -> listOffsets(a[1], a[2], a[3]);
            case "describe-topic-ids" -> describeTopicIds(a[1], a[2]);
            case "describe-quorum" -> describeQuorum(a[1]);
            case "describe-cluster" -> describeCluster(a[1]);
            case "describe-log-dirs" -> describeLogDirs(a[1], Integer.parseInt(a[2]));
            case "list-config-resources" -> listConfigResources(a[1], a.length > 2 ? a[2] : "");
            case "list-reassignments" -> listReassignments(a[1]);
            case "alter-reassignment" -> alterReassignment(a[1], a[2], Integer.parseInt(a[3]), a[4],
                    a.length > 5 && a[5].equals("no-rf-change"));
            case "elect-leaders" -> electLeaders(a[1], a[2], a[3]);
            case "alter-log-dir" -> alterLogDir(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), a[5]);
            case "create-partitions" -> createPartitions(a[1], a[2], Integer.parseInt(a[3]), a.length > 4 ? a[4] : "");
            case "describe-topics" -> describeTopics(a[1], a[2], a.length > 3 ? Integer.parseInt(a[3]) : 0);
            case "alter-configs" -> alterConfigs(a[1], a[2], a[3], a[4], a.length > 5 && a[5].equals("validate-only"));
            case "describe-configs" -> describeConfigs(a[1], a[2], a[3], a.length > 4 ? a[4] : "");
            case "delete-records" -> deleteRecords(a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4]));
            case "delete-group-offsets" -> deleteGroupOffsets(a[1], a[2], a[3]);
            case "alter-scram" -> alterScram(a[1], a[2]);
            case "describe-scram" -> describeScram(a[1], a.length > 2 ? a[2] : "");
            case "kip848-group" -> kip848Group(a[1], a[2], a[3], Integer.parseInt(a[4]), a[5],
                    Integer.parseInt(a[6]), a.length > 7 ? Integer.parseInt(a[7]) : 0);
            case "describe-consumer-group" -> describeConsumerGroup(a[1], a[2]);
            case "list-groups" -> listGroups(a[1]);
            case "streams-group" -> streamsGroup(a[1], a[2], a.length > 3 ? a[3] : "");
            case "txn-produce" -> txnProduce(a[1], a[2], Integer.parseInt(a[3]), a[4], a[5],
                    a.length > 6 ? Integer.parseInt(a[6]) : 60000);
            case "txn-zombie" -> txnZombie(a[1], a[2], a[3]);
            case "list-transactions" -> listTransactions(a[1]);
            case "consume-isolation" -> consumeIsolation(a[1], a[2], Integer.parseInt(a[3]), a[4]);
            case "consume-transform-produce" -> consumeTransformProduce(a[1], a[2], a[3], a[4], a[5], Long.parseLong(a[6]));
            case "create-acls" -> createAcls(a[1], a[2]);
            case "describe-acls" -> describeAcls(a[1], a.length > 2 ? a[2] : "ANY|null|ANY|null|null|ANY|ANY");
            case "delete-acls" -> deleteAcls(a[1], a[2]);
            case "produce-check" -> produceCheck(a[1], a[2], Arrays.copyOfRange(a, 3, a.length));
            case "consume-check" -> consumeCheck(a[1], a[2], a[3]);
            case "produce-for" -> produceFor(a[1], a[2], Long.parseLong(a[3]));
            case "share-consume" -> shareConsume(a[1], a[2], a[3], Integer.parseInt(a[4]));
            default -> throw new IllegalArgumentException("unknown command " + a[0]);
        }
        OUT.println("{\"type\":\"done\",\"command\":" + str(a[0]) + ",\"ms\":"
                + (System.nanoTime() - started) / 1_000_000 + "}");
        OUT.flush();
    }

    // --- Security: the client properties of -Dminibroker.client.config, ACLs, authorization -----

    /** Adds the properties of the file -Dminibroker.client.config names (security.protocol, ssl.*,
     *  sasl.*) to a client's: how the tests run every command over SSL, mTLS or SASL_SSL. */
    static Properties secured(Properties p) {
        String file = clientConfig;
        if (file == null) return p;
        try (java.io.Reader r = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(file))) {
            Properties extra = new Properties();
            extra.load(r);
            p.putAll(extra);
        } catch (java.io.IOException e) {
            throw new RuntimeException(e);
        }
        return p;
    }

    static String nullable(String s) {
        return s.equals("null") ? null : s;
    }

    /** TYPE|NAME|PATTERN|PRINCIPAL|HOST|OPERATION|PERMISSION, enum names as Kafka's, "null" for null. */
    static org.apache.kafka.common.acl.AclBindingFilter aclFilter(String spec) {
        String[] f = spec.split("\\|", -1);
        return new org.apache.kafka.common.acl.AclBindingFilter(
                new org.apache.kafka.common.resource.ResourcePatternFilter(
                        org.apache.kafka.common.resource.ResourceType.valueOf(f[0]), nullable(f[1]),
                        org.apache.kafka.common.resource.PatternType.valueOf(f[2])),
                new org.apache.kafka.common.acl.AccessControlEntryFilter(nullable(f[3]), nullable(f[4]),
                        org.apache.kafka.common.acl.AclOperation.valueOf(f[5]),
                        org.apache.kafka.common.acl.AclPermissionType.valueOf(f[6])));
    }

    static String aclJson(org.apache.kafka.common.acl.AclBinding b) {
        return "{\"type\":\"acl\",\"resource_type\":" + str(b.pattern().resourceType().name())
                + ",\"name\":" + str(b.pattern().name()) + ",\"pattern_type\":" + str(b.pattern().patternType().name())
                + ",\"principal\":" + str(b.entry().principal()) + ",\"host\":" + str(b.entry().host())
                + ",\"operation\":" + str(b.entry().operation().name())
                + ",\"permission\":" + str(b.entry().permissionType().name()) + "}";
    }

    /** Admin.createAcls of SPEC;SPEC... (each as aclFilter's, concrete values): one line per binding. */
    static void createAcls(String bootstrap, String specs) throws Exception {
        List<org.apache.kafka.common.acl.AclBinding> bindings = new ArrayList<>();
        for (String spec : specs.split(";")) {
            var filter = aclFilter(spec);
            bindings.add(new org.apache.kafka.common.acl.AclBinding(
                    new org.apache.kafka.common.resource.ResourcePattern(filter.patternFilter().resourceType(),
                            filter.patternFilter().name(), filter.patternFilter().patternType()),
                    new org.apache.kafka.common.acl.AccessControlEntry(filter.entryFilter().principal(),
                            filter.entryFilter().host(), filter.entryFilter().operation(),
                            filter.entryFilter().permissionType())));
        }
        try (Admin admin = admin(bootstrap)) {
            var values = admin.createAcls(bindings).values();
            for (var b : bindings) {
                OUT.println("{\"type\":\"acl-created\",\"acl\":" + aclJson(b) + "," + outcome(values.get(b)) + "}");
            }
        }
    }

    static void describeAcls(String bootstrap, String filter) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            var result = admin.describeAcls(aclFilter(filter)).values();
            try {
                for (var b : result.get()) OUT.println(aclJson(b));
            } catch (java.util.concurrent.ExecutionException e) {
                OUT.println("{\"type\":\"acl-error\",\"error\":" + str(e.getCause().getClass().getSimpleName()) + "}");
            }
        }
    }

    static void deleteAcls(String bootstrap, String filters) throws Exception {
        List<org.apache.kafka.common.acl.AclBindingFilter> list = new ArrayList<>();
        for (String spec : filters.split(";")) list.add(aclFilter(spec));
        try (Admin admin = admin(bootstrap)) {
            var values = admin.deleteAcls(list).values();
            for (var f : list) {
                try {
                    for (var r : values.get(f).get().values()) {
                        OUT.println("{\"type\":\"acl-deleted\",\"acl\":" + aclJson(r.binding()) + "}");
                    }
                } catch (java.util.concurrent.ExecutionException e) {
                    OUT.println("{\"type\":\"acl-error\",\"error\":" + str(e.getCause().getClass().getSimpleName()) + "}");
                }
            }
        }
    }

    /** One record to partition 0 (KEY=VALUE producer settings over producerProps'): its offset, or the
     *  simple class name of what refused it (TopicAuthorizationException, ...), from send() or its future. */
    static void produceCheck(String bootstrap, String topic, String[] settings) throws Exception {
        Properties p = producerProps(bootstrap, "none", "0");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        for (String kv : settings) {
            String[] pair = kv.split("=", 2);
            p.put(pair[0], pair[1]);
        }
        String error = "null";
        long offset = -1;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            try {
                offset = producer.send(new ProducerRecord<>(topic, 0, null, "checked".getBytes(StandardCharsets.UTF_8)))
                        .get().offset();
            } catch (java.util.concurrent.ExecutionException e) {
                error = str(refusal(e.getCause()));
            } catch (org.apache.kafka.common.KafkaException e) {
                error = str(refusal(e));
            }
        }
        OUT.println("{\"type\":\"produce-result\",\"offset\":" + offset + ",\"error\":" + error + "}");
    }

    /** The class that says why a send was refused: a plain KafkaException wraps it when the
     *  producer had already failed (a refused InitProducerId fails the producer before or after the
     *  send, as the threads meet), so the chain is followed down to its named cause. */
    static String refusal(Throwable t) {
        while (t.getClass() == org.apache.kafka.common.KafkaException.class && t.getCause() != null) {
            t = t.getCause();
        }
        return t.getClass().getSimpleName();
    }

    /** Records to partition 0 for MS milliseconds, one in flight at a time: how many were acked, and
     *  the first failure's class name (a long-lived connection, as KIP-368's re-authentication needs). */
    static void produceFor(String bootstrap, String topic, long ms) throws Exception {
        Properties p = producerProps(bootstrap, "none", "0");
        int acked = 0;
        String error = "null";
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            long end = System.currentTimeMillis() + ms;
            while (System.currentTimeMillis() < end) {
                try {
                    producer.send(new ProducerRecord<>(topic, 0, null, value(acked))).get();
                    acked++;
                } catch (java.util.concurrent.ExecutionException e) {
                    error = str(e.getCause().getClass().getSimpleName());
                    break;
                }
                Thread.sleep(20);
            }
        }
        OUT.println("{\"type\":\"produced-for\",\"acked\":" + acked + ",\"error\":" + error + "}");
    }

    /** subscribe() in GROUP and poll until a record comes or an exception is thrown (30 s at most):
     *  the records seen and the simple class name of the exception (GroupAuthorizationException, ...). */
    static void consumeCheck(String bootstrap, String topic, String group) throws Exception {
        Properties p = consumerProps(bootstrap, "mb-java-consume-check");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        String error = "null";
        int records = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (records == 0 && System.currentTimeMillis() < deadline) {
                try {
                    records += consumer.poll(Duration.ofMillis(500)).count();
                } catch (org.apache.kafka.common.KafkaException e) {
                    error = str(e.getClass().getSimpleName());
                    break;
                }
            }
        }
        OUT.println("{\"type\":\"consume-result\",\"records\":" + records + ",\"error\":" + error + "}");
    }

    static void shareConsume(String bootstrap, String topic, String group, int count) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "mb-java-share");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put("share.acknowledgement.mode", "explicit");
        Set<String> seen = new java.util.HashSet<>();
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(secured(p))) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (seen.size() < count && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    seen.add(r.partition() + ":" + r.offset());
                    OUT.println("{\"type\":\"record\",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                            + ",\"delivery_count\":" + r.deliveryCount().map(String::valueOf).orElse("null") + "}");
                }
                if (!records.isEmpty()) {
                    StringBuilder errors = new StringBuilder();
                    for (var e : consumer.commitSync().entrySet()) {
                        if (errors.length() > 0) errors.append(',');
                        errors.append(str(e.getKey().topic() + "-" + e.getKey().partition())).append(':')
                                .append(e.getValue().map(x -> str(x.getClass().getSimpleName())).orElse("null"));
                    }
                    OUT.println("{\"type\":\"share-commit\",\"errors\":{" + errors + "}}");
                    OUT.flush();
                }
            }
        }
    }

    // --- Admin -------------------------------------------------------------------------------

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "mb-java-admin");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        return Admin.create(secured(p));
    }

    static void createTopic(String bootstrap, String topic, int partitions, String configs) throws Exception {
        NewTopic newTopic = new NewTopic(topic, partitions, (short) 1);
        Map<String, String> topicConfigs = new HashMap<>();
        for (String kv : configs.split(";")) {
            if (kv.isEmpty()) continue;
            String[] pair = kv.split("=", 2);
            topicConfigs.put(pair[0], pair[1]);
        }
        if (!topicConfigs.isEmpty()) newTopic.configs(topicConfigs);
        try (Admin admin = admin(bootstrap)) {
            admin.createTopics(List.of(newTopic)).all().get();
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            OUT.println("{\"type\":\"created\",\"topic\":" + str(d.name()) + ",\"partitions\":"
                    + d.partitions().size() + ",\"topic_id\":" + str(d.topicId().toString()) + "}");
        }
    }

    static void createTopicsOnce(String bootstrap, String prefix, int count, int partitions) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        for (int i = 0; i < count; i++) topics.add(new NewTopic(prefix + "-" + i, partitions, (short) 1));
        var options = new org.apache.kafka.clients.admin.CreateTopicsOptions().retryOnQuotaViolation(false);
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.createTopics(topics, options).values();
            for (NewTopic t : topics) {
                String throttle = "null";
                try {
                    futures.get(t.name()).get();
                } catch (java.util.concurrent.ExecutionException e) {
                    if (e.getCause() instanceof org.apache.kafka.common.errors.ThrottlingQuotaExceededException q)
                        throttle = Integer.toString(q.throttleTimeMs());
                }
                OUT.println("{\"type\":\"topic-created\",\"topic\":" + str(t.name()) + ","
                        + outcome(futures.get(t.name())) + ",\"throttle_time_ms\":" + throttle + "}");
            }
        }
    }

    static void alterQuota(String bootstrap, String types, String names, String key, String value)
            throws Exception {
        ClientQuotaEntity entity = entity(types, names);
        Double v = value.equals("remove") ? null : Double.valueOf(value);
        try (Admin admin = admin(bootstrap)) {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                    List.of(new ClientQuotaAlteration.Op(key, v))))).all().get();
        }
        OUT.println("{\"type\":\"altered\",\"entity\":" + entityJson(entity) + ",\"key\":" + str(key)
                + ",\"value\":" + (v == null ? "null" : v.toString()) + "}");
    }

    static void describeQuotas(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            Map<ClientQuotaEntity, Map<String, Double>> all =
                    admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            for (var e : all.entrySet()) {
                StringBuilder values = new StringBuilder("{");
                for (var kv : new java.util.TreeMap<>(e.getValue()).entrySet()) {
                    if (values.length() > 1) values.append(',');
                    values.append(str(kv.getKey())).append(':').append(kv.getValue());
                }
                OUT.println("{\"type\":\"quota\",\"entity\":" + entityJson(e.getKey()) + ",\"values\":"
                        + values.append('}') + "}");
            }
        }
    }

    static ClientQuotaEntity entity(String types, String names) {
        String[] t = types.split(","), n = names.split(",", -1);
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < t.length; i++) m.put(t[i], n[i].equals("<default>") ? null : n[i]);
        return new ClientQuotaEntity(m);
    }

    static String entityJson(ClientQuotaEntity entity) {
        StringBuilder b = new StringBuilder("{");
        for (var e : new java.util.TreeMap<>(entity.entries()).entrySet()) {
            if (b.length() > 1) b.append(',');
            b.append(str(e.getKey())).append(':').append(e.getValue() == null ? "null" : str(e.getValue()));
        }
        return b.append('}').toString();
    }

    /** The simple class name of what a failed admin future threw, or null when it succeeded. */
    static String failure(org.apache.kafka.common.KafkaFuture<?> future) {
        try {
            future.get();
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    static String jsonOrNull(String s) {
        return s == null ? "null" : str(s);
    }

    static void listOffsets(String bootstrap, String topic, String spec) throws Exception {
        org.apache.kafka.clients.admin.OffsetSpec offsetSpec = switch (spec) {
            case "earliest" -> org.apache.kafka.clients.admin.OffsetSpec.earliest();
            case "latest" -> org.apache.kafka.clients.admin.OffsetSpec.latest();
            case "max-timestamp" -> org.apache.kafka.clients.admin.OffsetSpec.maxTimestamp();
            case "earliest-local" -> org.apache.kafka.clients.admin.OffsetSpec.earliestLocal();
            case "latest-tiered" -> org.apache.kafka.clients.admin.OffsetSpec.latestTiered();
            default -> org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(Long.parseLong(spec));
        };
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin(bootstrap)) {
            var info = admin.listOffsets(Map.of(tp, offsetSpec)).partitionResult(tp).get();
            OUT.println("{\"type\":\"listed-offset\",\"spec\":" + str(spec) + ",\"offset\":" + info.offset()
                    + ",\"timestamp\":" + info.timestamp() + ",\"leader_epoch\":"
                    + (info.leaderEpoch().isPresent() ? info.leaderEpoch().get() : "null") + "}");
        }
    }

    static void describeTopicIds(String bootstrap, String ids) throws Exception {
        List<org.apache.kafka.common.Uuid> uuids = new ArrayList<>();
        for (String id : ids.split(",")) uuids.add(org.apache.kafka.common.Uuid.fromString(id));
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.describeTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(uuids)).topicIdValues();
            for (var id : uuids) {
                String error = failure(futures.get(id));
                if (error != null) {
                    OUT.println("{\"type\":\"topic-by-id\",\"topic_id\":" + str(id.toString()) + ",\"error\":" + str(error) + "}");
                    continue;
                }
                TopicDescription d = futures.get(id).get();
                OUT.println("{\"type\":\"topic-by-id\",\"topic_id\":" + str(id.toString()) + ",\"name\":" + str(d.name())
                        + ",\"partitions\":" + d.partitions().size() + ",\"leader\":" + d.partitions().get(0).leader().id()
                        + ",\"error\":null}");
            }
        }
    }

    static void describeCluster(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            var c = admin.describeCluster();
            StringBuilder nodes = new StringBuilder("[");
            for (var n : new java.util.TreeMap<>(c.nodes().get().stream().collect(
                    java.util.stream.Collectors.toMap(org.apache.kafka.common.Node::id, x -> x))).values()) {
                if (nodes.length() > 1) nodes.append(',');
                nodes.append("[").append(n.id()).append(',').append(str(n.host() + ":" + n.port())).append(']');
            }
            OUT.println("{\"type\":\"cluster\",\"id\":" + str(c.clusterId().get()) + ",\"controller\":"
                    + c.controller().get().id() + ",\"nodes\":" + nodes.append(']') + "}");
        }
    }

    static void describeQuorum(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            var q = admin.describeMetadataQuorum().quorumInfo().get();
            StringBuilder voters = new StringBuilder("[");
            for (var v : q.voters()) {
                if (voters.length() > 1) voters.append(',');
                voters.append("{\"id\":").append(v.replicaId()).append(",\"log_end_offset\":").append(v.logEndOffset())
                        .append(",\"last_fetch\":").append(v.lastFetchTimestamp().orElse(-1))
                        .append(",\"last_caught_up\":").append(v.lastCaughtUpTimestamp().orElse(-1))
                        .append(",\"directory_id\":").append(str(v.replicaDirectoryId().toString())).append('}');
            }
            StringBuilder nodes = new StringBuilder("{");
            for (var e : q.nodes().entrySet()) {
                if (nodes.length() > 1) nodes.append(',');
                nodes.append(str(e.getKey().toString())).append(":[");
                boolean first = true;
                for (var endpoint : e.getValue().endpoints()) {
                    if (!first) nodes.append(',');
                    first = false;
                    nodes.append(str(endpoint.listener() + "://" + endpoint.host() + ":" + endpoint.port()));
                }
                nodes.append(']');
            }
            OUT.println("{\"type\":\"quorum\",\"leader\":" + q.leaderId() + ",\"epoch\":" + q.leaderEpoch()
                    + ",\"high_watermark\":" + q.highWatermark() + ",\"voters\":" + voters.append(']')
                    + ",\"observers\":" + q.observers().size() + ",\"nodes\":" + nodes.append('}') + "}");
        }
    }

    static void describeLogDirs(String bootstrap, int broker) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            var dirs = admin.describeLogDirs(List.of(broker)).allDescriptions().get().get(broker);
            for (var e : dirs.entrySet()) {
                var d = e.getValue();
                StringBuilder replicas = new StringBuilder("{");
                for (var r : d.replicaInfos().entrySet()) {
                    if (replicas.length() > 1) replicas.append(',');
                    replicas.append(str(r.getKey().toString())).append(":[").append(r.getValue().size()).append(',')
                            .append(r.getValue().offsetLag()).append(',').append(r.getValue().isFuture()).append(']');
                }
                OUT.println("{\"type\":\"log-dir\",\"path\":" + str(e.getKey()) + ",\"error\":"
                        + (d.error() == null ? "null" : str(d.error().getClass().getSimpleName()))
                        + ",\"total\":" + d.totalBytes().orElse(-1) + ",\"usable\":" + d.usableBytes().orElse(-1)
                        + ",\"replicas\":" + replicas.append('}') + "}");
            }
            List<org.apache.kafka.common.TopicPartitionReplica> asked = new ArrayList<>();
            for (var e : dirs.entrySet()) {
                for (var tp : e.getValue().replicaInfos().keySet()) {
                    asked.add(new org.apache.kafka.common.TopicPartitionReplica(tp.topic(), tp.partition(), broker));
                }
            }
            var replicaDirs = admin.describeReplicaLogDirs(asked).all().get();
            for (var e : replicaDirs.entrySet()) {
                OUT.println("{\"type\":\"replica-log-dir\",\"replica\":" + str(e.getKey().topic() + "-" + e.getKey().partition())
                        + ",\"dir\":" + jsonOrNull(e.getValue().getCurrentReplicaLogDir())
                        + ",\"future_dir\":" + jsonOrNull(e.getValue().getFutureReplicaLogDir()) + "}");
            }
        }
    }

    static void listConfigResources(String bootstrap, String types) throws Exception {
        Set<org.apache.kafka.common.config.ConfigResource.Type> wanted = new java.util.HashSet<>();
        for (String t : types.split(",")) {
            if (!t.isEmpty()) wanted.add(org.apache.kafka.common.config.ConfigResource.Type.valueOf(t));
        }
        try (Admin admin = admin(bootstrap)) {
            var result = admin.listConfigResources(wanted, new org.apache.kafka.clients.admin.ListConfigResourcesOptions());
            for (var r : result.all().get()) {
                OUT.println("{\"type\":\"config-resource\",\"resource_type\":" + str(r.type().name()) + ",\"name\":"
                        + str(r.name()) + "}");
            }
        }
    }

    static void listReassignments(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            var all = admin.listPartitionReassignments().reassignments().get();
            OUT.println("{\"type\":\"reassignments\",\"count\":" + all.size() + "}");
        }
    }

    static void alterReassignment(String bootstrap, String topic, int partition, String replicas, boolean noRfChange)
            throws Exception {
        Optional<org.apache.kafka.clients.admin.NewPartitionReassignment> target = Optional.empty();
        if (!replicas.equals("cancel")) {
            List<Integer> ids = new ArrayList<>();
            for (String id : replicas.split(",")) ids.add(Integer.parseInt(id));
            target = Optional.of(new org.apache.kafka.clients.admin.NewPartitionReassignment(ids));
        }
        TopicPartition tp = new TopicPartition(topic, partition);
        var options = new org.apache.kafka.clients.admin.AlterPartitionReassignmentsOptions()
                .allowReplicationFactorChange(!noRfChange);
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.alterPartitionReassignments(Map.of(tp, target), options).values();
            OUT.println("{\"type\":\"reassigned\",\"replicas\":" + str(replicas) + ",\"error\":"
                    + jsonOrNull(failure(futures.get(tp))) + "}");
        }
    }

    static void electLeaders(String bootstrap, String type, String partitions) throws Exception {
        Set<TopicPartition> tps = null;
        if (!partitions.equals("all")) {
            tps = new java.util.HashSet<>();
            for (String tp : partitions.split(",")) {
                int colon = tp.lastIndexOf(':');
                tps.add(new TopicPartition(tp.substring(0, colon), Integer.parseInt(tp.substring(colon + 1))));
            }
        }
        var election = type.equals("unclean") ? org.apache.kafka.common.ElectionType.UNCLEAN
                : org.apache.kafka.common.ElectionType.PREFERRED;
        try (Admin admin = admin(bootstrap)) {
            var result = admin.electLeaders(election, tps).partitions().get();
            for (var e : new java.util.TreeMap<>(Map.copyOf(result.entrySet().stream().collect(
                    java.util.stream.Collectors.toMap(x -> x.getKey().toString(), Map.Entry::getValue)))).entrySet()) {
                OUT.println("{\"type\":\"elected\",\"partition\":" + str(e.getKey()) + ",\"error\":"
                        + jsonOrNull(e.getValue().map(t -> t.getClass().getSimpleName()).orElse(null)) + "}");
            }
        }
    }

    static void alterLogDir(String bootstrap, String topic, int partition, int broker, String dir) throws Exception {
        var replica = new org.apache.kafka.common.TopicPartitionReplica(topic, partition, broker);
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.alterReplicaLogDirs(Map.of(replica, dir)).values();
            OUT.println("{\"type\":\"log-dir-altered\",\"dir\":" + str(dir) + ",\"error\":"
                    + jsonOrNull(failure(futures.get(replica))) + "}");
        }
    }

    /** The simple class name of what failed, and its message, as JSON fields (both null on success). */
    static String outcome(org.apache.kafka.common.KafkaFuture<?> future) {
        try {
            future.get();
            return "\"error\":null,\"message\":null";
        } catch (java.util.concurrent.ExecutionException e) {
            return "\"error\":" + str(e.getCause().getClass().getSimpleName()) + ",\"message\":"
                    + jsonOrNull(e.getCause().getMessage());
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    static void createPartitions(String bootstrap, String topic, int count, String extra) throws Exception {
        org.apache.kafka.clients.admin.NewPartitions increase = org.apache.kafka.clients.admin.NewPartitions.increaseTo(count);
        var options = new org.apache.kafka.clients.admin.CreatePartitionsOptions();
        if (extra.equals("validate-only")) {
            options.validateOnly(true);
        } else if (!extra.isEmpty()) {
            List<List<Integer>> assignments = new ArrayList<>();
            for (String partition : extra.split(";")) {
                List<Integer> ids = new ArrayList<>();
                for (String id : partition.split(",")) ids.add(Integer.parseInt(id));
                assignments.add(ids);
            }
            increase = org.apache.kafka.clients.admin.NewPartitions.increaseTo(count, assignments);
        }
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.createPartitions(Map.of(topic, increase), options).values();
            OUT.println("{\"type\":\"partitions-created\",\"topic\":" + str(topic) + "," + outcome(futures.get(topic)) + "}");
        }
    }

    static void describeTopics(String bootstrap, String topics, int limit) throws Exception {
        var options = new org.apache.kafka.clients.admin.DescribeTopicsOptions();
        if (limit > 0) options.partitionSizeLimitPerResponse(limit);
        List<String> names = List.of(topics.split(","));
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.describeTopics(names, options).topicNameValues();
            for (String name : names) {
                String error = failure(futures.get(name));
                if (error != null) {
                    OUT.println("{\"type\":\"topic\",\"name\":" + str(name) + ",\"error\":" + str(error) + "}");
                    continue;
                }
                TopicDescription d = futures.get(name).get();
                StringBuilder partitions = new StringBuilder("[");
                for (var p : d.partitions()) {
                    if (partitions.length() > 1) partitions.append(',');
                    partitions.append("[").append(p.partition()).append(',').append(p.leader().id()).append(',')
                            .append(p.replicas().size()).append(',').append(p.isr().size()).append(']');
                }
                OUT.println("{\"type\":\"topic\",\"name\":" + str(d.name()) + ",\"error\":null,\"topic_id\":"
                        + str(d.topicId().toString()) + ",\"internal\":" + d.isInternal() + ",\"partitions\":"
                        + partitions.append(']') + "}");
            }
        }
    }

    static org.apache.kafka.common.config.ConfigResource configResource(String type, String name) {
        return new org.apache.kafka.common.config.ConfigResource(
                org.apache.kafka.common.config.ConfigResource.Type.valueOf(type), name);
    }

    static void alterConfigs(String bootstrap, String type, String name, String ops, boolean validateOnly) throws Exception {
        List<org.apache.kafka.clients.admin.AlterConfigOp> alterations = new ArrayList<>();
        for (String op : ops.split(";")) {
            int colon = op.indexOf(':'), equals = op.indexOf('=');
            String key = equals < 0 ? op.substring(colon + 1) : op.substring(colon + 1, equals);
            String value = equals < 0 ? null : op.substring(equals + 1);
            alterations.add(new org.apache.kafka.clients.admin.AlterConfigOp(
                    new org.apache.kafka.clients.admin.ConfigEntry(key, value),
                    org.apache.kafka.clients.admin.AlterConfigOp.OpType.valueOf(op.substring(0, colon))));
        }
        var resource = configResource(type, name);
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.incrementalAlterConfigs(Map.of(resource, alterations),
                    new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(validateOnly)).values();
            OUT.println("{\"type\":\"configs-altered\",\"name\":" + str(name) + "," + outcome(futures.get(resource)) + "}");
        }
    }

    static void describeConfigs(String bootstrap, String type, String name, String keys) throws Exception {
        var resource = configResource(type, name);
        Set<String> wanted = keys.isEmpty() ? Set.of() : Set.of(keys.split(","));
        try (Admin admin = admin(bootstrap)) {
            var config = admin.describeConfigs(List.of(resource),
                    new org.apache.kafka.clients.admin.DescribeConfigsOptions().includeSynonyms(true)).all().get().get(resource);
            for (var entry : new java.util.TreeMap<>(config.entries().stream().collect(
                    java.util.stream.Collectors.toMap(org.apache.kafka.clients.admin.ConfigEntry::name, e -> e))).values()) {
                if (!wanted.isEmpty() && !wanted.contains(entry.name())) continue;
                StringBuilder synonyms = new StringBuilder("[");
                for (var synonym : entry.synonyms()) {
                    if (synonyms.length() > 1) synonyms.append(',');
                    synonyms.append('[').append(str(synonym.name())).append(',').append(jsonOrNull(synonym.value()))
                            .append(',').append(str(synonym.source().name())).append(']');
                }
                OUT.println("{\"type\":\"config\",\"name\":" + str(entry.name()) + ",\"value\":" + jsonOrNull(entry.value())
                        + ",\"source\":" + str(entry.source().name()) + ",\"read_only\":" + entry.isReadOnly()
                        + ",\"sensitive\":" + entry.isSensitive() + ",\"config_type\":" + str(entry.type().name())
                        + ",\"synonyms\":" + synonyms.append(']') + "}");
            }
        }
    }

    static void deleteRecords(String bootstrap, String topic, int partition, long offset) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = admin(bootstrap)) {
            var future = admin.deleteRecords(Map.of(tp, org.apache.kafka.clients.admin.RecordsToDelete.beforeOffset(offset)))
                    .lowWatermarks().get(tp);
            String error = failure(future);
            OUT.println("{\"type\":\"records-deleted\",\"offset\":" + offset + ",\"low_watermark\":"
                    + (error == null ? Long.toString(future.get().lowWatermark()) : "null") + ",\"error\":" + jsonOrNull(error) + "}");
        }
    }

    static void deleteGroupOffsets(String bootstrap, String group, String partitions) throws Exception {
        Set<TopicPartition> tps = new java.util.LinkedHashSet<>();
        for (String tp : partitions.split(",")) {
            int colon = tp.lastIndexOf(':');
            tps.add(new TopicPartition(tp.substring(0, colon), Integer.parseInt(tp.substring(colon + 1))));
        }
        try (Admin admin = admin(bootstrap)) {
            var result = admin.deleteConsumerGroupOffsets(group, tps);
            for (TopicPartition tp : tps) {
                OUT.println("{\"type\":\"group-offset-deleted\",\"partition\":" + str(tp.toString()) + ","
                        + outcome(result.partitionResult(tp)) + "}");
            }
            OUT.println("{\"type\":\"group-offsets-deleted\",\"group\":" + str(group) + "," + outcome(result.all()) + "}");
        }
    }

    static org.apache.kafka.clients.admin.ScramMechanism scramMechanism(String bits) {
        return bits.equals("512") ? org.apache.kafka.clients.admin.ScramMechanism.SCRAM_SHA_512
                : org.apache.kafka.clients.admin.ScramMechanism.SCRAM_SHA_256;
    }

    static void alterScram(String bootstrap, String specs) throws Exception {
        List<org.apache.kafka.clients.admin.UserScramCredentialAlteration> alterations = new ArrayList<>();
        List<String> users = new ArrayList<>();
        for (String spec : specs.split(",")) {
            String[] f = spec.split(":");
            users.add(f[1]);
            if (f[0].equals("delete")) {
                alterations.add(new org.apache.kafka.clients.admin.UserScramCredentialDeletion(f[1], scramMechanism(f[2])));
            } else {
                alterations.add(new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(f[1],
                        new org.apache.kafka.clients.admin.ScramCredentialInfo(scramMechanism(f[2]), Integer.parseInt(f[4])), f[3]));
            }
        }
        try (Admin admin = admin(bootstrap)) {
            var futures = admin.alterUserScramCredentials(alterations).values();
            for (String user : new java.util.LinkedHashSet<>(users)) {
                OUT.println("{\"type\":\"scram-altered\",\"user\":" + str(user) + "," + outcome(futures.get(user)) + "}");
            }
        }
    }

    static void describeScram(String bootstrap, String users) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            var result = users.isEmpty() ? admin.describeUserScramCredentials()
                    : admin.describeUserScramCredentials(List.of(users.split(",")));
            List<String> names = users.isEmpty() ? new ArrayList<>(new TreeSet<>(result.users().get())) : List.of(users.split(","));
            for (String user : names) {
                var future = result.description(user);
                String error = failure(future);
                StringBuilder infos = new StringBuilder("[");
                if (error == null) {
                    for (var info : future.get().credentialInfos()) {
                        if (infos.length() > 1) infos.append(',');
                        infos.append('[').append(str(info.mechanism().mechanismName())).append(',').append(info.iterations()).append(']');
                    }
                }
                OUT.println("{\"type\":\"scram-user\",\"user\":" + str(user) + ",\"error\":" + jsonOrNull(error)
                        + ",\"credentials\":" + infos.append(']') + "}");
            }
        }
    }

    // --- Producer ----------------------------------------------------------------------------

    static byte[] value(int i) {
        int n = (int) ((i * 7919L) % 301);
        byte[] v = new byte[n];
        for (int j = 0; j < n; j++) v[j] = (byte) (i * 131 + j * 29 + (j >> 3));
        return v;
    }

    /** An idempotent producer's settings (acks=all), as an application would set them. */
    static Properties producerProps(String bootstrap, String compression, String lingerMs) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "mb-java-producer");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, lingerMs);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return secured(p);
    }

    /** One call of minibroker's control endpoint (docs/control.md) with java.net.http: METHOD PATH and
     *  a JSON body (empty: none). Prints the status and the JSON answer as it came. */
    static void control(String url, String method, String path, String body) throws Exception {
        java.net.http.HttpClient http = java.net.http.HttpClient.newHttpClient();
        java.net.http.HttpRequest.Builder request = java.net.http.HttpRequest.newBuilder(java.net.URI.create(url + path))
                .header("Content-Type", "application/json")
                .method(method, body.isEmpty() ? java.net.http.HttpRequest.BodyPublishers.noBody()
                        : java.net.http.HttpRequest.BodyPublishers.ofString(body));
        java.net.http.HttpResponse<String> response = http.send(request.build(),
                java.net.http.HttpResponse.BodyHandlers.ofString());
        OUT.println("{\"type\":\"control\",\"status\":" + response.statusCode() + ",\"answer\":"
                + response.body().strip() + "}");
    }

    static void produce(String bootstrap, String topic, int count, String compression) throws Exception {
        Properties p = producerProps(bootstrap, compression, "5");
        List<Future<RecordMetadata>> sent = new ArrayList<>(count);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            int partitions = producer.partitionsFor(topic).size();
            for (int i = 0; i < count; i++) {
                long origin = (i * 2654435761L) & 0xffffffffL;
                List<Header> headers = List.of(
                        new RecordHeader("trace", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("origin", new byte[] {(byte) (origin >>> 24), (byte) (origin >>> 16),
                                (byte) (origin >>> 8), (byte) origin}));
                sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, null,
                        ("key-" + i).getBytes(StandardCharsets.UTF_8), value(i), headers)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata m = sent.get(i).get();
                OUT.println("{\"type\":\"produced\",\"index\":" + i + ",\"partition\":" + m.partition()
                        + ",\"offset\":" + m.offset() + "}");
            }
        }
    }

    /** A producer with `clientId` sending a record every 50 ms for `millis` (client telemetry, KIP-714:
     *  enable.metrics.push is on by default, so it pushes its metrics while it runs), then closed,
     *  which sends its terminating push. Prints its client instance id. */
    static void producePushing(String bootstrap, String topic, String clientId, long millis) throws Exception {
        Properties p = producerProps(bootstrap, "none", "5");
        p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            var instance = producer.clientInstanceId(java.time.Duration.ofSeconds(30));
            OUT.println("{\"type\":\"client-instance\",\"id\":" + str(instance.toString()) + "}");
            OUT.flush();
            long end = System.currentTimeMillis() + millis;
            int i = 0;
            while (System.currentTimeMillis() < end) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("k" + i).getBytes(StandardCharsets.UTF_8), value(i++))).get();
                Thread.sleep(50);
            }
            OUT.println("{\"type\":\"sent\",\"count\":" + i + "}");
        }
    }

    /** One record per timestamp to partition 0, all in one batch (a long linger, then flush). */
    static void produceTimestamps(String bootstrap, String topic, String compression, String timestamps) throws Exception {
        Properties p = producerProps(bootstrap, compression, "30000");
        String[] ts = timestamps.split(",");
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < ts.length; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, Long.parseLong(ts[i]), null, value(i))));
            }
            producer.flush();
            for (int i = 0; i < ts.length; i++) {
                OUT.println("{\"type\":\"produced\",\"index\":" + i + ",\"offset\":" + sent.get(i).get().offset() + "}");
            }
        }
    }

    static void offsetsForTimes(String bootstrap, String topic, long timestamp) {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(consumerProps(bootstrap, "mb-java-consumer"))) {
            var found = consumer.offsetsForTimes(Map.of(tp, timestamp), TIMEOUT).get(tp);
            OUT.println("{\"type\":\"offset-for-time\",\"target\":" + timestamp + ",\"offset\":"
                    + (found == null ? "null" : found.offset()) + ",\"timestamp\":"
                    + (found == null ? "null" : found.timestamp()) + "}");
        }
    }

    /** Produce COUNT records to partition 0 and report each send's outcome, failures included
     *  (what the Java client does with a broker error is what the caller studies). BATCH_SIZE, when
     *  given, is batch.size in bytes (small: many batches in flight at once). */
    static void produceOutcome(String bootstrap, String topic, int count, String deliveryTimeoutMs, String batchSize)
            throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "mb-java-outcome");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(Integer.parseInt(deliveryTimeoutMs) / 2));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, deliveryTimeoutMs);
        if (batchSize != null) p.put(ProducerConfig.BATCH_SIZE_CONFIG, batchSize);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        secured(p);
        List<Future<RecordMetadata>> sent = new ArrayList<>(count);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, null, value(i))));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                try {
                    RecordMetadata m = sent.get(i).get();
                    OUT.println("{\"type\":\"produced\",\"index\":" + i + ",\"offset\":" + m.offset() + "}");
                } catch (java.util.concurrent.ExecutionException e) {
                    OUT.println("{\"type\":\"failed\",\"index\":" + i + ",\"error\":" + str(e.getCause().toString()) + "}");
                }
            }
        }
    }

    // --- Records of any size, checked byte for byte --------------------------------------------

    /** The record sizes of a SIZES argument: SIZE[*COUNT],... in bytes, in record order. */
    static int[] sizes(String spec) {
        List<Integer> out = new ArrayList<>();
        for (String part : spec.split(",")) {
            String[] sc = part.split("\\*");
            int count = sc.length > 1 ? Integer.parseInt(sc[1]) : 1;
            for (int i = 0; i < count; i++) out.add(Integer.parseInt(sc[0]));
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    /** payload(LABEL, SIZE), as described at the top of this file. */
    static byte[] payload(String label, int size) throws Exception {
        java.security.MessageDigest sha = java.security.MessageDigest.getInstance("SHA-256");
        byte[] prefix = label.getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[size];
        java.nio.ByteBuffer block = java.nio.ByteBuffer.allocate(8);
        for (long b = 0; b * 256 < size; b++) {
            sha.update(prefix);
            block.clear();
            sha.update(block.putLong(b).array());
            byte[] digest = sha.digest();
            for (int r = 0; r < 8; r++) {
                int at = (int) (b * 256 + r * 32);
                if (at >= size) break;
                System.arraycopy(digest, 0, out, at, Math.min(32, size - at));
            }
        }
        return out;
    }

    static String sha256(byte[] data) throws Exception {
        byte[] d = java.security.MessageDigest.getInstance("SHA-256").digest(data);
        StringBuilder s = new StringBuilder(64);
        for (byte x : d) s.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        return s.toString();
    }

    static void override(Properties p, String[] settings) {
        for (String kv : settings) {
            String[] pair = kv.split("=", 2);
            p.put(pair[0], pair[1]);
        }
    }

    static void producePayloads(String bootstrap, String topic, String spec, String[] settings) throws Exception {
        int[] sizes = sizes(spec);
        Properties p = producerProps(bootstrap, "none", "5");
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "mb-java-payloads");
        override(p, settings);
        List<Future<RecordMetadata>> sent = new ArrayList<>(sizes.length);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            int partitions = producer.partitionsFor(topic).size();
            for (int i = 0; i < sizes.length; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, i % partitions,
                        ("key-" + i).getBytes(StandardCharsets.UTF_8), payload(topic + "/" + i, sizes[i]))));
            }
            producer.flush();
            for (int i = 0; i < sizes.length; i++) {
                try {
                    RecordMetadata m = sent.get(i).get();
                    OUT.println("{\"type\":\"produced\",\"index\":" + i + ",\"partition\":" + m.partition()
                            + ",\"offset\":" + m.offset() + "}");
                } catch (java.util.concurrent.ExecutionException e) {
                    OUT.println("{\"type\":\"failed\",\"index\":" + i + ",\"error\":" + str(e.getCause().toString()) + "}");
                }
            }
        }
    }

    static void consumePayloads(String bootstrap, String topic, int partitions, String spec, String[] settings)
            throws Exception {
        int[] sizes = sizes(spec);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
        Properties props = consumerProps(bootstrap, "mb-java-payloads");
        override(props, settings);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            int got = 0;
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (got < sizes.length && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    got++;
                    String key = r.key() == null ? "" : new String(r.key(), StandardCharsets.UTF_8);
                    int index = key.startsWith("key-") ? Integer.parseInt(key.substring(4)) : -1;
                    boolean match = index >= 0 && index < sizes.length && r.partition() == index % partitions
                            && Arrays.equals(r.value(), payload(topic + "/" + index, sizes[index]));
                    OUT.println("{\"type\":\"checked\",\"topic\":" + str(r.topic()) + ",\"index\":" + index
                            + ",\"partition\":" + r.partition()
                            + ",\"offset\":" + r.offset() + ",\"size\":" + (r.value() == null ? -1 : r.value().length)
                            + ",\"match\":" + match + ",\"sha256\":" + str(r.value() == null ? "" : sha256(r.value()))
                            + "}");
                }
            }
        }
    }

    // --- Consumers ---------------------------------------------------------------------------

    static Properties consumerProps(String bootstrap, String clientId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return secured(p);
    }

    static void printRecord(ConsumerRecord<byte[], byte[]> r, String member) {
        StringBuilder b = new StringBuilder(256);
        b.append("{\"type\":\"record\"");
        if (member != null) b.append(",\"member\":").append(str(member));
        b.append(",\"topic\":").append(str(r.topic()))
                .append(",\"partition\":").append(r.partition()).append(",\"offset\":").append(r.offset())
                .append(",\"key\":").append(hex(r.key())).append(",\"value\":").append(hex(r.value()))
                .append(",\"timestamp\":").append(r.timestamp())
                .append(",\"timestamp_type\":").append(str(r.timestampType().toString()))
                .append(",\"headers\":[");
        boolean first = true;
        for (Header h : r.headers()) {
            if (!first) b.append(',');
            first = false;
            b.append('[').append(str(h.key())).append(',').append(hex(h.value())).append(']');
        }
        b.append("]}");
        synchronized (OUT) {
            OUT.println(b);
        }
    }

    static void consume(String bootstrap, String topic, int partitions, int count) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
        try (KafkaConsumer<byte[], byte[]> consumer =
                     new KafkaConsumer<>(consumerProps(bootstrap, "mb-java-consumer"))) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            int got = 0;
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (got < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    printRecord(r, null);
                    got++;
                }
            }
        }
    }

    /** Partition 0 of TOPIC from the beginning with isolation.level ISOLATION, until the position
     * reaches endOffsets() (for read_committed the consumer asks ListOffsets with READ_COMMITTED:
     * the last stable offset). Prints each record, then {"type":"end","end_offset":..,"position":..}. */
    static void consumeIsolated(String bootstrap, String topic, String isolation) {
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties p = consumerProps(bootstrap, "mb-java-isolated");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (consumer.position(tp) < end && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) printRecord(r, null);
            }
            OUT.println("{\"type\":\"end\",\"end_offset\":" + end + ",\"position\":" + consumer.position(tp) + "}");
        }
    }

    static void describeProducers(String bootstrap, String topic, int partition) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = admin(bootstrap)) {
            var result = admin.describeProducers(List.of(tp)).partitionResult(tp).get();
            for (var state : result.activeProducers()) {
                OUT.println("{\"type\":\"producer\",\"producer_id\":" + state.producerId() + ",\"epoch\":"
                        + state.producerEpoch() + ",\"last_sequence\":" + state.lastSequence()
                        + ",\"last_timestamp\":" + state.lastTimestamp() + ",\"coordinator_epoch\":"
                        + state.coordinatorEpoch().orElse(-1) + ",\"txn_start_offset\":"
                        + state.currentTransactionStartOffset().orElse(-1) + "}");
            }
        }
    }

    /** MEMBERS consumers in one group (threads of this JVM) read COUNT records between them. Member
     * m subscribes once member m-1 holds partitions, so each later join rebalances a stable group;
     * all keep polling until the group has read every record and every member holds partitions.
     * Positions are committed on revocation and at the end, so no record is read twice. */
    static void groupConsume(String bootstrap, String topic, String group, int count, int members)
            throws Exception {
        AtomicInteger got = new AtomicInteger();
        AtomicBoolean done = new AtomicBoolean();
        Map<String, Set<Integer>> assigned = new ConcurrentHashMap<>();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        long deadline = System.nanoTime() + TIMEOUT.toNanos();
        for (int m = 0; m < members; m++) {
            String member = "member-" + m, previous = "member-" + (m - 1);
            boolean waits = m > 0;
            Thread t = new Thread(() -> {
                // Join one after another: each later join must rebalance a stable group.
                while (waits && !assigned.containsKey(previous) && System.nanoTime() < deadline) {
                    try {
                        Thread.sleep(20);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                Properties p = consumerProps(bootstrap, "mb-java-" + member);
                p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
                p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
                p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "20000");  // the rebalance timeout
                try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
                    consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                            consumer.commitSync();
                            assigned.remove(member);
                            event("revoked", member, partitions);
                        }

                        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                            Set<Integer> ps = new TreeSet<>();
                            for (TopicPartition tp : partitions) ps.add(tp.partition());
                            assigned.put(member, ps);
                            event("assigned", member, partitions);
                        }
                    });
                    while (!done.get() && System.nanoTime() < deadline) {
                        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                            printRecord(r, member);
                            got.incrementAndGet();
                        }
                        if (got.get() >= count && assigned.size() == members
                                && assigned.values().stream().noneMatch(Set::isEmpty)) {
                            done.set(true);  // the first to see it stops them all, before anyone leaves
                        }
                    }
                    consumer.commitSync();
                    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
                    for (var e : committed.entrySet()) {
                        synchronized (OUT) {
                            OUT.println("{\"type\":\"committed\",\"member\":" + str(member) + ",\"partition\":"
                                    + e.getKey().partition() + ",\"offset\":"
                                    + (e.getValue() == null ? "null" : e.getValue().offset()) + "}");
                        }
                    }
                    event("final", member, consumer.assignment());
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            }, member);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
        if (!failures.isEmpty()) {
            for (Throwable f : failures.subList(1, failures.size())) failures.get(0).addSuppressed(f);
            throw new RuntimeException("group consumer failed", failures.get(0));
        }
        if (got.get() < count) {
            throw new RuntimeException("group read " + got.get() + " of " + count + " records in " + TIMEOUT
                    + "; assignment " + assigned);
        }
    }

    // --- KIP-848 consumer groups ------------------------------------------------------------

    static final AtomicLong SEQUENCE = new AtomicLong();

    static final class Kip848Member implements Runnable {
        final String name, bootstrap, topic, group;
        final AtomicInteger consumed;
        final AtomicBoolean stop = new AtomicBoolean();
        final Set<Integer> owned = ConcurrentHashMap.newKeySet();
        final Thread thread;
        volatile Throwable failure;

        Kip848Member(String name, String bootstrap, String topic, String group, AtomicInteger consumed) {
            this.name = name;
            this.bootstrap = bootstrap;
            this.topic = topic;
            this.group = group;
            this.consumed = consumed;
            this.thread = new Thread(this, name);
        }

        void ownership(String type, Collection<TopicPartition> partitions) {
            Set<Integer> ps = new TreeSet<>();
            for (TopicPartition tp : partitions) ps.add(tp.partition());
            if (type.equals("assigned")) owned.addAll(ps); else owned.removeAll(ps);
            synchronized (OUT) {  // one lock orders every member's events: the sequence is global
                OUT.println("{\"type\":" + str(type) + ",\"member\":" + str(name) + ",\"seq\":"
                        + SEQUENCE.incrementAndGet() + ",\"partitions\":" + Arrays.toString(ps.toArray()) + "}");
            }
        }

        public void run() {
            Properties p = consumerProps(bootstrap, "mb-java-" + name);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "20000");  // the rebalance timeout
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        if (!partitions.isEmpty()) consumer.commitSync();  // hand over at the committed position
                        ownership("revoked", partitions);
                    }

                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        ownership("assigned", partitions);
                    }

                    public void onPartitionsLost(Collection<TopicPartition> partitions) {
                        ownership("lost", partitions);
                    }
                });
                while (!stop.get()) {
                    int got = 0;
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        printRecord(r, name);
                        got++;
                    }
                    if (got > 0) {
                        consumer.commitSync();
                        consumed.addAndGet(got);
                    }
                }
                consumer.commitSync();
                for (var e : consumer.committed(consumer.assignment()).entrySet()) {
                    synchronized (OUT) {
                        OUT.println("{\"type\":\"committed\",\"member\":" + str(name) + ",\"partition\":"
                                + e.getKey().partition() + ",\"offset\":"
                                + (e.getValue() == null ? "null" : e.getValue().offset()) + "}");
                    }
                }
                ownership("closed", consumer.assignment());
            } catch (Throwable t) {
                failure = t;
            }
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(TIMEOUT.toMillis());
            if (failure != null) throw new RuntimeException(name + " failed", failure);
            if (thread.isAlive()) throw new RuntimeException(name + " did not stop");
        }
    }

    /** Waits until the members' assignments cover all `partitions`, none shared, balanced (sizes
     *  differ by at most one: the reconciliation has finished). */
    static void awaitShared(List<Kip848Member> members, int partitions, long deadline, String what) throws Exception {
        while (true) {
            Set<Integer> all = new TreeSet<>();
            int total = 0, least = Integer.MAX_VALUE, most = 0;
            for (Kip848Member m : members) {
                if (m.failure != null) throw new RuntimeException(m.name + " failed", m.failure);
                Set<Integer> mine = new TreeSet<>(m.owned);
                least = Math.min(least, mine.size());
                most = Math.max(most, mine.size());
                total += mine.size();
                all.addAll(mine);
            }
            if (most - least <= 1 && total == partitions && all.size() == partitions) {
                StringBuilder b = new StringBuilder("{\"type\":\"shared\",\"what\":" + str(what) + ",\"owners\":{");
                for (Kip848Member m : members) {
                    if (b.charAt(b.length() - 1) != '{') b.append(',');
                    b.append(str(m.name)).append(':').append(Arrays.toString(new TreeSet<>(m.owned).toArray()));
                }
                synchronized (OUT) {
                    OUT.println(b.append("}}"));
                }
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new RuntimeException("members did not come to share " + partitions + " partitions (" + what + ")");
            }
            Thread.sleep(20);
        }
    }

    static void produceValues(String bootstrap, String topic, String prefix, int count) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(bootstrap, "none", "5"))) {
            int partitions = producer.partitionsFor(topic).size();
            List<Future<RecordMetadata>> sent = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, null,
                        (prefix + "-" + i).getBytes(StandardCharsets.UTF_8))));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) f.get();
        }
    }

    static void awaitConsumed(AtomicInteger consumed, int count, List<Kip848Member> members, long deadline)
            throws Exception {
        while (consumed.get() < count) {
            for (Kip848Member m : members) {
                if (m.failure != null) throw new RuntimeException(m.name + " failed", m.failure);
            }
            if (System.nanoTime() > deadline) {
                throw new RuntimeException("consumed " + consumed.get() + " of " + count + " records");
            }
            Thread.sleep(20);
        }
    }

    static void kip848Group(String bootstrap, String topic, String group, int count, String prefix, int first,
            int second) throws Exception {
        long deadline = System.nanoTime() + 2 * TIMEOUT.toNanos();
        int partitions;
        try (Admin admin = admin(bootstrap)) {
            partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        }
        AtomicInteger consumed = new AtomicInteger();
        List<Kip848Member> members = new ArrayList<>();
        try {
            for (int m = 0; m < count; m++) {
                Kip848Member member = new Kip848Member("member-" + m, bootstrap, topic, group, consumed);
                members.add(member);
                member.thread.start();
                // Join one after another: each later join must rebalance a group that has settled.
                while (member.owned.isEmpty() && m < partitions) {
                    if (member.failure != null) throw new RuntimeException(member.name + " failed", member.failure);
                    if (System.nanoTime() > deadline) throw new RuntimeException(member.name + " got no partition");
                    Thread.sleep(20);
                }
            }
            awaitShared(members, partitions, deadline, "all");
            produceValues(bootstrap, topic, prefix, first);
            awaitConsumed(consumed, first, members, deadline);
            if (second > 0) {
                Kip848Member leaver = members.remove(members.size() - 1);
                leaver.close();
                awaitShared(members, partitions, deadline, "after-leave");
                produceValues(bootstrap, topic, prefix + "-after-leave", second);
                awaitConsumed(consumed, first + second, members, deadline);
            }
        } finally {
            Throwable failed = null;
            for (Kip848Member m : members) {
                try {
                    m.close();
                } catch (Throwable t) {
                    if (failed == null) failed = t;
                }
            }
            if (failed != null) throw new RuntimeException(failed);
        }
    }

    static void describeConsumerGroup(String bootstrap, String group) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            StringBuilder members = new StringBuilder("[");
            for (MemberDescription m : d.members()) {
                if (members.length() > 1) members.append(',');
                Set<Integer> ps = new TreeSet<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) ps.add(tp.partition());
                members.append("{\"member_id\":").append(str(m.consumerId())).append(",\"client_id\":")
                        .append(str(m.clientId())).append(",\"epoch\":").append(m.memberEpoch().orElse(-99))
                        .append(",\"partitions\":").append(Arrays.toString(ps.toArray())).append('}');
            }
            OUT.println("{\"type\":\"consumer-group\",\"group\":" + str(d.groupId()) + ",\"group_type\":"
                    + str(d.type().toString()) + ",\"state\":" + str(d.groupState().toString())
                    + ",\"group_epoch\":" + d.groupEpoch().orElse(-99) + ",\"assignment_epoch\":"
                    + d.targetAssignmentEpoch().orElse(-99) + ",\"assignor\":" + str(d.partitionAssignor())
                    + ",\"members\":" + members.append(']') + "}");
        }
    }

    /** A KIP-1071 streams group through Admin, as kafka-streams-groups.sh sees it: describeStreamsGroups,
     *  listStreamsGroupOffsets, and with "delete" deleteStreamsGroups (then describe again). */
    static void streamsGroup(String bootstrap, String group, String then) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            describeStreamsGroup(admin, group);
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listStreamsGroupOffsets(
                    Map.of(group, new org.apache.kafka.clients.admin.ListStreamsGroupOffsetsSpec()))
                    .partitionsToOffsetAndMetadata(group).get();
            StringBuilder out = new StringBuilder("{");
            for (Map.Entry<String, Long> e : offsetsByName(offsets).entrySet()) {
                if (out.length() > 1) out.append(',');
                out.append(str(e.getKey())).append(':').append(e.getValue());
            }
            OUT.println("{\"type\":\"streams-group-offsets\",\"group\":" + str(group) + ",\"offsets\":" + out.append('}') + "}");
            if (then.equals("delete")) {
                // alterStreamsGroupOffsets and deleteStreamsGroupOffsets on the Empty group first: the
                // lowest partition's offset set to 0, the highest one's deleted.
                List<TopicPartition> partitions = new ArrayList<>(offsets.keySet());
                partitions.sort(Comparator.comparing(TopicPartition::toString));
                admin.alterStreamsGroupOffsets(group, Map.of(partitions.get(0), new OffsetAndMetadata(0))).all().get();
                admin.deleteStreamsGroupOffsets(group, Set.of(partitions.get(partitions.size() - 1))).all().get();
                Map<TopicPartition, OffsetAndMetadata> changed = admin.listStreamsGroupOffsets(
                        Map.of(group, new org.apache.kafka.clients.admin.ListStreamsGroupOffsetsSpec()))
                        .partitionsToOffsetAndMetadata(group).get();
                StringBuilder after = new StringBuilder("{");
                for (Map.Entry<String, Long> e : offsetsByName(changed).entrySet()) {
                    if (after.length() > 1) after.append(',');
                    after.append(str(e.getKey())).append(':').append(e.getValue());
                }
                OUT.println("{\"type\":\"streams-group-offsets-changed\",\"group\":" + str(group) + ",\"first\":"
                        + str(partitions.get(0).toString()) + ",\"last\":" + str(partitions.get(partitions.size() - 1).toString())
                        + ",\"offsets\":" + after.append('}') + "}");
                try {
                    admin.deleteStreamsGroups(List.of(group)).all().get();
                    OUT.println("{\"type\":\"streams-group-deleted\",\"group\":" + str(group) + ",\"error\":\"\"}");
                } catch (ExecutionException e) {
                    OUT.println("{\"type\":\"streams-group-deleted\",\"group\":" + str(group) + ",\"error\":"
                            + str(e.getCause().getClass().getSimpleName()) + "}");
                }
                describeStreamsGroup(admin, group);
            }
        }
    }

    static Map<String, Long> offsetsByName(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Long> out = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            if (e.getValue() != null) out.put(e.getKey().topic() + "-" + e.getKey().partition(), e.getValue().offset());
        }
        return out;
    }

    static void describeStreamsGroup(Admin admin, String group) throws Exception {
        try {
            org.apache.kafka.clients.admin.StreamsGroupDescription d =
                    admin.describeStreamsGroups(List.of(group)).all().get().get(group);
            StringBuilder members = new StringBuilder("[");
            for (org.apache.kafka.clients.admin.StreamsGroupMemberDescription m : d.members()) {
                if (members.length() > 1) members.append(',');
                StringBuilder active = new StringBuilder("{");
                for (org.apache.kafka.clients.admin.StreamsGroupMemberAssignment.TaskIds t : m.assignment().activeTasks()) {
                    if (active.length() > 1) active.append(',');
                    active.append(str(t.subtopologyId())).append(':').append(new TreeSet<>(t.partitions()));
                }
                members.append("{\"member_id\":").append(str(m.memberId())).append(",\"epoch\":").append(m.memberEpoch())
                        .append(",\"process_id\":").append(str(m.processId())).append(",\"client_id\":")
                        .append(str(m.clientId())).append(",\"active\":").append(active.append('}')).append('}');
            }
            StringBuilder subtopologies = new StringBuilder("{");
            for (org.apache.kafka.clients.admin.StreamsGroupSubtopologyDescription s : d.subtopologies()) {
                if (subtopologies.length() > 1) subtopologies.append(',');
                subtopologies.append(str(s.subtopologyId())).append(":{\"sources\":").append(strs(s.sourceTopics()))
                        .append(",\"changelogs\":").append(strs(s.stateChangelogTopics().keySet()))
                        .append(",\"repartition_sources\":").append(strs(s.repartitionSourceTopics().keySet())).append('}');
            }
            OUT.println("{\"type\":\"streams-group\",\"group\":" + str(d.groupId()) + ",\"state\":"
                    + str(d.groupState().toString()) + ",\"group_epoch\":" + d.groupEpoch() + ",\"assignment_epoch\":"
                    + d.targetAssignmentEpoch() + ",\"topology_epoch\":" + d.topologyEpoch() + ",\"subtopologies\":"
                    + subtopologies.append('}') + ",\"members\":" + members.append(']') + "}");
        } catch (ExecutionException e) {
            OUT.println("{\"type\":\"streams-group\",\"group\":" + str(group) + ",\"error\":"
                    + str(e.getCause().getClass().getSimpleName()) + "}");
        }
    }

    static String strs(Collection<String> values) {
        StringBuilder out = new StringBuilder("[");
        for (String v : new TreeSet<>(values)) {
            if (out.length() > 1) out.append(',');
            out.append(str(v));
        }
        return out.append(']').toString();
    }

    static void listGroups(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            for (GroupListing g : admin.listGroups().all().get()) {
                OUT.println("{\"type\":\"group\",\"group\":" + str(g.groupId()) + ",\"group_type\":"
                        + str(g.type().map(Object::toString).orElse("")) + ",\"state\":"
                        + str(g.groupState().map(Object::toString).orElse("")) + ",\"protocol\":"
                        + str(g.protocol()) + "}");
            }
        }
    }

    static void event(String type, String member, Collection<TopicPartition> partitions) {
        Set<Integer> ps = new TreeSet<>();
        for (TopicPartition tp : partitions) ps.add(tp.partition());
        synchronized (OUT) {
            OUT.println("{\"type\":" + str(type) + ",\"member\":" + str(member) + ",\"partitions\":"
                    + Arrays.toString(ps.toArray()) + "}");
        }
    }

    // --- transactions (KIP-98) ---------------------------------------------------------------

    static KafkaProducer<byte[], byte[]> txnProducer(String bootstrap, String txnId, int timeoutMs) {
        Properties p = producerProps(bootstrap, "none", "0");
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "mb-java-txn-" + txnId);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "60000");
        return new KafkaProducer<>(p);
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static void txnEvent(String event, String step, Throwable error) {
        Throwable cause = error;
        while (cause != null && cause.getCause() != null
                && !(cause instanceof org.apache.kafka.common.KafkaException && cause.getCause() == null)) {
            if (cause instanceof org.apache.kafka.common.errors.ApiException) break;
            cause = cause.getCause();
        }
        OUT.println("{\"type\":\"txn\",\"event\":" + str(event) + ",\"step\":" + str(step) + ",\"error\":"
                + (error == null ? "null" : str(error.getClass().getSimpleName())) + ",\"cause\":"
                + (cause == null ? "null" : str(cause.getClass().getSimpleName())) + "}");
        OUT.flush();
    }

    /** PLAN: comma list of ACTION:N, each one transaction of N records (key "<step>-<i>", value the
     * same) to partition i % PARTITIONS: commit, abort, open (left open: the producer is closed
     * without waiting, so nothing aborts it but the broker), timeout (sends, then waits past
     * transaction.timeout.ms and tries to commit: the broker has aborted and fenced it). */
    static void txnProduce(String bootstrap, String topic, int partitions, String txnId, String plan,
                           int timeoutMs) throws Exception {
        KafkaProducer<byte[], byte[]> producer = txnProducer(bootstrap, txnId, timeoutMs);
        producer.initTransactions();
        txnEvent("initialized", "", null);
        int stepNo = 0;
        for (String step : plan.split(",")) {
            String[] s = step.split(":");
            String action = s[0], name = txnId + "/" + action + stepNo++;
            int n = Integer.parseInt(s[1]);
            producer.beginTransaction();
            for (int i = 0; i < n; i++) {
                byte[] kv = bytes(name + "-" + i);
                producer.send(new ProducerRecord<>(topic, i % partitions, kv, kv));
            }
            producer.flush();
            try {
                switch (action) {
                    case "commit" -> producer.commitTransaction();
                    case "abort" -> producer.abortTransaction();
                    case "open" -> {
                        producer.close(Duration.ZERO);
                        txnEvent("left-open", name, null);
                        return;
                    }
                    case "timeout" -> {
                        Thread.sleep(timeoutMs + 2500L);
                        producer.send(new ProducerRecord<>(topic, 0, bytes(name + "-late"), bytes(name + "-late"))).get();
                        producer.commitTransaction();
                    }
                    default -> throw new IllegalArgumentException("unknown action " + action);
                }
                txnEvent(action, name, null);
            } catch (Exception e) {
                txnEvent(action + "-failed", name, e);
                producer.close(Duration.ZERO);
                return;
            }
        }
        producer.close();
    }

    /** A zombie: producer A opens a transaction; producer B, same transactional id, initializes
     * (fencing A, whose transaction the broker aborts) and commits its own; A then tries to send
     * and commit. */
    static void txnZombie(String bootstrap, String topic, String txnId) throws Exception {
        KafkaProducer<byte[], byte[]> a = txnProducer(bootstrap, txnId, 60000);
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(topic, 0, bytes("zombie-0"), bytes("zombie-0"))).get();
        KafkaProducer<byte[], byte[]> b = txnProducer(bootstrap, txnId, 60000);
        b.initTransactions();
        txnEvent("fenced-by-new", "b", null);
        b.beginTransaction();
        b.send(new ProducerRecord<>(topic, 0, bytes("new-0"), bytes("new-0")));
        b.commitTransaction();
        txnEvent("commit", "b", null);
        try {
            a.send(new ProducerRecord<>(topic, 0, bytes("zombie-1"), bytes("zombie-1"))).get();
            a.commitTransaction();
            txnEvent("commit", "a", null);
        } catch (Exception e) {
            txnEvent("commit-failed", "a", e);
        }
        a.close(Duration.ZERO);
        b.close();
    }

    /** assign() every partition, read from the beginning up to the end offsets (the last stable
     * offsets under read_committed), print each record. */
    static void consumeIsolation(String bootstrap, String topic, int partitions, String isolation) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
        Properties props = consumerProps(bootstrap, "mb-java-" + isolation);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (System.nanoTime() < deadline) {
                boolean caughtUp = true;
                for (TopicPartition tp : tps) caughtUp &= consumer.position(tp) >= end.get(tp);
                if (caughtUp) break;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    OUT.println("{\"type\":\"record\",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                            + ",\"key\":" + (r.key() == null ? "null" : str(new String(r.key(), StandardCharsets.UTF_8)))
                            + ",\"timestamp\":" + r.timestamp() + ",\"timestamp_type\":"
                            + str(r.timestampType().toString()) + "}");
                }
            }
            for (TopicPartition tp : tps) {
                OUT.println("{\"type\":\"end\",\"partition\":" + tp.partition() + ",\"offset\":" + end.get(tp) + "}");
            }
        }
    }

    /** Admin.listTransactions (all states), then describeTransactions of each id listed. */
    static void listTransactions(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            List<String> ids = new ArrayList<>();
            for (var listing : admin.listTransactions().all().get()) {
                ids.add(listing.transactionalId());
                OUT.println("{\"type\":\"txn-listing\",\"id\":" + str(listing.transactionalId()) + ",\"producer_id\":"
                        + listing.producerId() + ",\"state\":" + str(listing.state().toString()) + "}");
            }
            for (var e : admin.describeTransactions(ids).all().get().entrySet()) {
                var d = e.getValue();
                OUT.println("{\"type\":\"txn-description\",\"id\":" + str(e.getKey()) + ",\"state\":"
                        + str(d.state().toString()) + ",\"producer_id\":" + d.producerId() + ",\"epoch\":"
                        + d.producerEpoch() + ",\"timeout_ms\":" + d.transactionTimeoutMs() + ",\"partitions\":"
                        + d.topicPartitions().size() + "}");
            }
        }
    }

    /** The exactly-once loop: a read_committed group consumer of IN, a transactional producer to
     * OUT, each poll's records in one transaction with the consumed offsets
     * (sendOffsetsToTransaction). Runs until the group's committed offsets reach every input
     * record (COUNT in all), riding out broker restarts: an abortable error aborts and rewinds
     * to the committed offsets, a fatal one (fenced) starts a new producer. */
    static void consumeTransformProduce(String bootstrap, String in, String out, String group, String txnId,
                                        long count) throws Exception {
        Properties cp = consumerProps(bootstrap, "mb-java-eos-consumer");
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        long deadline = System.nanoTime() + Duration.ofSeconds(150).toNanos();
        KafkaProducer<byte[], byte[]> producer = txnProducer(bootstrap, txnId, 30000);
        producer.initTransactions();
        long committed = 0;
        int transactions = 0, aborted = 0, restarts = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(in));
            while (committed < count && System.nanoTime() < deadline) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        producer.send(new ProducerRecord<>(out, r.partition(), r.key(), r.key()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    commitWithRetries(producer);
                    transactions++;
                } catch (org.apache.kafka.common.errors.ProducerFencedException
                         | org.apache.kafka.common.errors.InvalidProducerEpochException
                         | org.apache.kafka.common.errors.OutOfOrderSequenceException
                         | IllegalStateException e) {
                    txnEvent("restart-producer", "", e);
                    producer.close(Duration.ZERO);
                    producer = txnProducer(bootstrap, txnId, 30000);
                    producer.initTransactions();
                    restarts++;
                    rewind(consumer);
                    continue;
                } catch (org.apache.kafka.common.KafkaException e) {
                    txnEvent("abort", "", e);
                    try {
                        producer.abortTransaction();
                    } catch (org.apache.kafka.common.KafkaException again) {
                        txnEvent("restart-producer", "", again);
                        producer.close(Duration.ZERO);
                        producer = txnProducer(bootstrap, txnId, 30000);
                        producer.initTransactions();
                        restarts++;
                    }
                    aborted++;
                    rewind(consumer);
                    continue;
                }
                committed = 0;
                for (var e : consumer.committed(consumer.assignment(), Duration.ofSeconds(30)).entrySet()) {
                    if (e.getValue() != null) committed += e.getValue().offset();
                }
                if (transactions % 5 == 0) {
                    OUT.println("{\"type\":\"progress\",\"committed\":" + committed + "}");
                    OUT.flush();
                }
            }
        }
        producer.close();
        OUT.println("{\"type\":\"eos\",\"committed\":" + committed + ",\"transactions\":" + transactions
                + ",\"aborted\":" + aborted + ",\"producer_restarts\":" + restarts + "}");
    }

    static void commitWithRetries(KafkaProducer<byte[], byte[]> producer) {
        for (int attempt = 0; ; attempt++) {
            try {
                producer.commitTransaction();
                return;
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                if (attempt >= 3) throw e;  // a commit that timed out may be retried as it is
                txnEvent("commit-retry", "", e);
            }
        }
    }

    /** Back to the group's committed offsets (the output of what follows them was aborted). */
    static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        var committed = consumer.committed(consumer.assignment(), Duration.ofSeconds(60));
        for (TopicPartition tp : consumer.assignment()) {
            OffsetAndMetadata om = committed.get(tp);
            if (om != null) consumer.seek(tp, om.offset());
            else consumer.seekToBeginning(List.of(tp));
        }
    }

    // --- JSON --------------------------------------------------------------------------------

    static String hex(byte[] b) {
        if (b == null) return "null";
        StringBuilder s = new StringBuilder(b.length * 2 + 2).append('"');
        for (byte x : b) s.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        return s.append('"').toString();
    }

    static String str(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }
}
