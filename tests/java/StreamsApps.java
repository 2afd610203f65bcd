import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams applications the tests run against minibroker (Apache Kafka's kafka-streams, as an
 * application would use it), one per JVM, until the JVM is told to stop (SIGTERM: the shutdown hook
 * closes the application cleanly, committing its work):
 *
 *   word-count BOOTSTRAP APP_ID STATE_DIR INPUT OUTPUT GUARANTEE PROTOCOLS
 *       lines -> words (flatMapValues) -> groupBy word (a repartition topic) -> count (a state store
 *       with its changelog topic) -> OUTPUT (word -> count as a decimal string).
 *   sum BOOTSTRAP APP_ID STATE_DIR INPUT OUTPUT GUARANTEE PROTOCOLS
 *       key -> its records counted (no repartition): every update emitted (no caching), so the
 *       output of a key is 1, 2, 3, ... exactly once under exactly_once_v2.
 *
 * GUARANTEE is processing.guarantee (at_least_once, exactly_once_v2). PROTOCOLS names the rebalance
 * protocols to run the application with (group.protocol: classic, streams; comma-separated): one
 * KafkaStreams per protocol in this JVM, each reading INPUT as application APP_ID-PROTOCOL (its own
 * group, internal topics and state directory STATE_DIR/PROTOCOL) and writing OUTPUT-PROTOCOL, so one
 * JVM run shows both protocols. Standby replicas 0, record caches off and a short commit interval:
 * each input record's update reaches the output quickly. Prints one JSON line per state change
 * ({"type":"state","app":PROTOCOL,...}).
 */
public class StreamsApps {
    public static void main(String[] a) throws Exception {
        String app = a[0], bootstrap = a[1], appId = a[2], stateDir = a[3], input = a[4], output = a[5], guarantee = a[6];
        String[] protocols = (a.length > 7 ? a[7] : "classic").split(",");
        List<KafkaStreams> running = new ArrayList<>();
        for (String protocol : protocols) {
            running.add(start(app, protocol, bootstrap, appId + "-" + protocol, stateDir + "/" + protocol, input,
                    output + "-" + protocol, guarantee));
        }
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running.parallelStream().forEach(streams -> streams.close(Duration.ofSeconds(30)));
            System.out.println("{\"type\":\"closed\"}");
            System.out.flush();
            stopped.countDown();
        }));
        stopped.await();
    }

    static KafkaStreams start(String app, String protocol, String bootstrap, String appId, String stateDir, String input,
                              String output, String guarantee) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 0);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            // The streams protocol takes its session and heartbeat from the broker (group.streams.*).
            p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
            p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 500);
        }
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> lines = builder.stream(input);
        if (app.equals("word-count")) {
            lines.flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                    .filter((key, word) -> !word.isEmpty())
                    .groupBy((key, word) -> word, Grouped.as("words"))
                    .count(Materialized.as("word-counts"))
                    .toStream()
                    .mapValues(count -> Long.toString(count))
                    .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else if (app.equals("sum")) {
            lines.groupByKey()
                    .count(Materialized.as("key-counts"))
                    .toStream()
                    .mapValues(count -> Long.toString(count))
                    .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else {
            throw new IllegalArgumentException("unknown application " + app);
        }

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"type\":\"state\",\"app\":\"" + protocol + "\",\"state\":\"" + now
                    + "\",\"before\":\"" + before + "\"}");
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("{\"type\":\"error\",\"app\":\"" + protocol + "\",\"error\":\""
                    + e.getClass().getSimpleName() + "\",\"message\":" + quote(String.valueOf(e.getMessage())) + "}");
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        return streams;
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }
}
