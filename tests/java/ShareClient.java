// A small command-line driver for the real Java share consumer (KafkaShareConsumer of kafka-clients
// at the version tests/java/pom.xml names), used by tests/clients/test_share_java.py against
// minibroker. It uses only the public KafkaShareConsumer API with the settings an application would
// use. Compiled and run by tests/support/share_client.py.
//
// Usage: java -cp 'LIBS/*:CLASSES' ShareClient COMMAND ARGS... [-- COMMAND ARGS...]...
// Commands run one after another in one JVM, separated by "--" (JVM start-up is the slow part).
//
//   consume BOOTSTRAP TOPIC GROUP MEMBERS COUNT [KEY=VALUE...]
//       MEMBERS share consumers of GROUP (one thread each) subscribe to TOPIC and poll until COUNT
//       distinct records were delivered between them, or until timeout.ms (default 30000); then each
//       keeps polling for linger.ms (default 0) to catch any record delivered twice; then each closes.
//       Options:
//         mode=implicit|explicit   share.acknowledgement.mode (default implicit)
//         ack=accept|release|reject|reject-odd|release-first|none
//                                  explicit mode: how each record is acknowledged (reject-odd rejects
//                                  odd offsets and accepts the others; release-first releases a
//                                  record the first time a member sees it and accepts it after;
//                                  none acknowledges nothing), then commitSync after each poll
//         stall=true               after its first poll that returns records, the member prints
//                                  "stalled" and sleeps (holding its records) until the process is
//                                  stopped: a consumer that hangs with its connection open
//         max.records=N            max.poll.records
//         polls=N                  the member stops after N polls that returned records
//         process.ms=N             the member sleeps N ms after each poll that returned records
//         commit.delay.ms=N        explicit mode: the member sleeps N ms between acknowledging a poll's
//                                  records and its commitSync (a window in which they are held)
//         KEY=VALUE                any other key is a consumer config (e.g. share.acquire.mode)
//
// Output: one JSON object per line on stdout, {"type": ...}:
//   {"type":"record","member":M,"partition":P,"offset":O,"key":K,"value":V,"delivery_count":D,"ack":A}
//   {"type":"commit","member":M,"errors":{"topic-p": "ExceptionClass"|null},"offsets":{"p": [O...]}}
//                                    (the offsets acknowledged in that commitSync, by partition)
//   {"type":"stalled","member":M}    {"type":"closed","member":M}    {"type":"done","command":C}

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareClient {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    static synchronized void emit(String json) {
        OUT.println(json);
    }

    static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        List<List<String>> commands = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (String arg : args) {
            if (arg.equals("--")) {
                commands.add(current);
                current = new ArrayList<>();
            } else {
                current.add(arg);
            }
        }
        commands.add(current);
        for (List<String> command : commands) {
            String[] a = command.toArray(new String[0]);
            switch (a[0]) {
                case "consume" -> consume(a[1], a[2], a[3], Integer.parseInt(a[4]), Integer.parseInt(a[5]),
                        Arrays.copyOfRange(a, 6, a.length));
                default -> throw new IllegalArgumentException("unknown command " + a[0]);
            }
            emit("{\"type\":\"done\",\"command\":" + str(a[0]) + "}");
        }
        System.exit(0);
    }

    static void consume(String bootstrap, String topic, String group, int members, int count, String[] options)
            throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (String option : options) {
            int eq = option.indexOf('=');
            opts.put(option.substring(0, eq), option.substring(eq + 1));
        }
        String mode = opts.getOrDefault("mode", "implicit");
        String ack = opts.getOrDefault("ack", "accept");
        boolean stall = Boolean.parseBoolean(opts.getOrDefault("stall", "false"));
        long timeoutMs = Long.parseLong(opts.getOrDefault("timeout.ms", "30000"));
        long lingerMs = Long.parseLong(opts.getOrDefault("linger.ms", "0"));
        int polls = Integer.parseInt(opts.getOrDefault("polls", "0"));
        long processMs = Long.parseLong(opts.getOrDefault("process.ms", "0"));
        long commitDelayMs = Long.parseLong(opts.getOrDefault("commit.delay.ms", "0"));
        Set<String> seen = ConcurrentHashMap.newKeySet();
        long deadline = System.currentTimeMillis() + timeoutMs;
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            final int member = m;
            Properties props = new Properties();
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.CLIENT_ID_CONFIG, "share-" + member);
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            props.put("share.acknowledgement.mode", mode);
            if (opts.containsKey("max.records")) {
                props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, opts.get("max.records"));
            }
            for (Map.Entry<String, String> e : opts.entrySet()) {
                if (e.getKey().contains(".") && !Set.of("timeout.ms", "linger.ms", "max.records", "process.ms", "commit.delay.ms")
                        .contains(e.getKey())) {
                    props.put(e.getKey(), e.getValue());
                }
            }
            Thread thread = new Thread(() -> {
                try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
                    consumer.subscribe(List.of(topic));
                    Set<Long> releasedOnce = new HashSet<>();
                    long lingerUntil = -1;
                    int nonEmptyPolls = 0;
                    while (true) {
                        long now = System.currentTimeMillis();
                        if (now > deadline) {
                            break;
                        }
                        if (seen.size() >= count) {
                            if (lingerUntil < 0) {
                                lingerUntil = now + lingerMs;
                            }
                            if (now >= lingerUntil) {
                                break;
                            }
                        }
                        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                        Map<Integer, List<Long>> acked = new HashMap<>();
                        for (ConsumerRecord<String, String> r : records) {
                            String key = r.partition() + ":" + r.offset();
                            String given = "none";
                            if (mode.equals("explicit")) {
                                AcknowledgeType type = switch (ack) {
                                    case "accept" -> AcknowledgeType.ACCEPT;
                                    case "release" -> AcknowledgeType.RELEASE;
                                    case "reject" -> AcknowledgeType.REJECT;
                                    case "reject-odd" -> r.offset() % 2 == 1 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                                    case "release-first" -> releasedOnce.add(r.offset()) ? AcknowledgeType.RELEASE
                                            : AcknowledgeType.ACCEPT;
                                    default -> null;
                                };
                                if (type != null) {
                                    consumer.acknowledge(r, type);
                                    given = type.name();
                                    acked.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r.offset());
                                }
                            }
                            if (!given.equals("RELEASE")) {
                                seen.add(key);
                            }
                            emit("{\"type\":\"record\",\"member\":" + member + ",\"partition\":" + r.partition()
                                    + ",\"offset\":" + r.offset() + ",\"key\":" + str(r.key()) + ",\"value\":"
                                    + str(r.value()) + ",\"delivery_count\":"
                                    + r.deliveryCount().map(String::valueOf).orElse("null") + ",\"ack\":" + str(given) + "}");
                        }
                        if (!records.isEmpty() && mode.equals("explicit") && !ack.equals("none")) {
                            if (commitDelayMs > 0) {
                                Thread.sleep(commitDelayMs);
                            }
                            Map<TopicIdPartition, Optional<KafkaException>> result = consumer.commitSync();
                            StringBuilder b = new StringBuilder();
                            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
                                if (b.length() > 0) {
                                    b.append(',');
                                }
                                b.append(str(e.getKey().topic() + "-" + e.getKey().partition())).append(':')
                                        .append(e.getValue().map(x -> str(x.getClass().getSimpleName())).orElse("null"));
                            }
                            StringBuilder o = new StringBuilder();
                            for (Map.Entry<Integer, List<Long>> e : acked.entrySet()) {
                                if (o.length() > 0) {
                                    o.append(',');
                                }
                                o.append(str(String.valueOf(e.getKey()))).append(':').append(e.getValue());
                            }
                            emit("{\"type\":\"commit\",\"member\":" + member + ",\"errors\":{" + b + "},\"offsets\":{"
                                    + o + "}}");
                        }
                        if (!records.isEmpty()) {
                            nonEmptyPolls++;
                            if (processMs > 0) {
                                Thread.sleep(processMs);
                            }
                            if (polls > 0 && nonEmptyPolls >= polls) {
                                break;
                            }
                        }
                        if (stall && !records.isEmpty()) {
                            emit("{\"type\":\"stalled\",\"member\":" + member + "}");
                            Thread.sleep(Long.MAX_VALUE);
                        }
                    }
                } catch (Throwable t) {
                    synchronized (failures) {
                        failures.add(t);
                    }
                }
                emit("{\"type\":\"closed\",\"member\":" + member + "}");
            });
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        if (!failures.isEmpty()) {
            failures.get(0).printStackTrace();
            System.exit(3);
        }
    }
}
