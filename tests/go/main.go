// goclients: a small command-line driver for the Go Kafka clients people use - franz-go (kgo and
// kadm), IBM's sarama and segmentio's kafka-go - used by tests/clients/test_interop_go.py against
// minibroker, as tests/java/MiniClient.java is for Java. It uses each client's public API with the
// settings an application would use. tests/support/go_clients.py builds it once per test session.
//
// Usage: goclients CLIENT COMMAND ARGS... [-- CLIENT COMMAND ARGS...]...
// CLIENT is franz, sarama (at the newest protocol versions it speaks), sarama-default (at its default
// Config.Version) or kafkago.
// Several commands run one after another in one process, separated by "--".
//
//	franz|sarama create-topic BOOTSTRAP TOPIC PARTITIONS    kadm CreateTopic / ClusterAdmin.CreateTopic
//	franz|sarama|kafkago produce BOOTSTRAP TOPIC PARTITIONS COUNT [FIRST [COMPRESSION]]
//	    records FIRST..FIRST+COUNT-1 (the formula below), record i -> partition i % PARTITIONS;
//	    franz and sarama produce idempotently (acks=all), kafka-go with acks=all; COMPRESSION is
//	    none, gzip, snappy, lz4 or zstd (default: the client's, snappy for franz, none for the others)
//	franz|sarama|kafkago consume BOOTSTRAP TOPIC PARTITIONS COUNT [read_committed]
//	    every partition from the earliest offset (assigned, no group) until COUNT records
//	franz|sarama|kafkago group-consume BOOTSTRAP TOPIC GROUP COUNT [consumer]
//	    one member of GROUP (franz: the KIP-848 protocol with "consumer") reads COUNT records from
//	    the committed offsets (earliest when none), commits them, and leaves
//	franz|sarama group BOOTSTRAP TOPIC GROUP MEMBERS PARTITIONS COUNT [consumer]
//	    MEMBERS consumers join GROUP; once every partition is assigned to one of them, COUNT
//	    records are produced and consumed by the group, each member committing what it read
//	franz|sarama txn-produce BOOTSTRAP TOPIC TXN_ID PLAN
//	    transactions to partition 0 by PLAN, e.g. "commit:3,abort:2": 3 records then commit, 2
//	    then abort; record k of transaction t has key "t<t>-<k>" and value "<outcome>-<t>-<k>"
//	franz eos BOOTSTRAP IN OUT GROUP TXN_ID COUNT
//	    consume-transform-produce (kgo.GroupTransactSession): COUNT records of IN, each value
//	    reversed, to OUT partition 0, with the group's offsets committed in the transaction
//	franz describe-group BOOTSTRAP GROUP    kadm DescribeGroups and FetchOffsets
//	franz admin BOOTSTRAP TOPIC GROUP TXN_ID SPARE_TOPIC
//	    kadm's admin calls one after another (franz_admin.go), each call's outcome printed
//	http control URL METHOD PATH [JSON]
//	    one call of minibroker's control endpoint with net/http (control.go), its answer printed
//
// Output: one JSON object per line on stdout, {"type": ...}; bytes are hex strings, null as null;
// {"type": "done", "command": ...} after each command. A failure prints {"type": "error"} and exits 1.
// Record i of `produce` is MiniClient's: key "key-<i>", value of length (i * 7919) % 301 with byte
// j = (i * 131 + j * 29 + (j >> 3)) & 0xff, headers ("trace", "<i>"), ("origin", the 4 big-endian
// bytes of (i * 2654435761) mod 2^32).
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Timeout bounds every command: a broker that stops answering fails the command, not the test run.
const Timeout = 90 * time.Second

var out = json.NewEncoder(os.Stdout)
var outMu sync.Mutex

func emit(fields map[string]any) {
	outMu.Lock()
	defer outMu.Unlock()
	if err := out.Encode(fields); err != nil {
		panic(err)
	}
}

func hexOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return hex.EncodeToString(b)
}

type header struct {
	Key   string
	Value []byte
}

// record is what the consume commands print, the same for every client.
func emitRecord(client, member, topic string, partition int32, offset int64, key, value []byte, headers []header) {
	hs := make([][2]any, 0, len(headers))
	for _, h := range headers {
		hs = append(hs, [2]any{h.Key, hex.EncodeToString(h.Value)})
	}
	line := map[string]any{"type": "record", "client": client, "topic": topic, "partition": partition,
		"offset": offset, "key": hexOrNil(key), "value": hexOrNil(value), "headers": hs}
	if member != "" {
		line["member"] = member
	}
	emit(line)
}

// testRecord is record i of `produce` (MiniClient's formula).
func testRecord(i int) (key, value []byte, headers []header) {
	key = []byte(fmt.Sprintf("key-%d", i))
	value = make([]byte, (i*7919)%301)
	for j := range value {
		value[j] = byte((i*131 + j*29 + (j >> 3)) & 0xff)
	}
	origin := make([]byte, 4)
	binary.BigEndian.PutUint32(origin, uint32(uint64(i)*2654435761))
	return key, value, []header{{"trace", []byte(strconv.Itoa(i))}, {"origin", origin}}
}

type step struct {
	outcome string // "commit" or "abort"
	count   int
}

func parsePlan(plan string) ([]step, error) {
	var steps []step
	for _, part := range strings.Split(plan, ",") {
		outcome, n, ok := strings.Cut(part, ":")
		count, err := strconv.Atoi(n)
		if !ok || err != nil || (outcome != "commit" && outcome != "abort") {
			return nil, fmt.Errorf("bad plan step %q (want commit:N or abort:N)", part)
		}
		steps = append(steps, step{outcome, count})
	}
	return steps, nil
}

func txnRecord(t, k int, outcome string) (key, value []byte) {
	return []byte(fmt.Sprintf("t%d-%d", t, k)), []byte(fmt.Sprintf("%s-%d-%d", outcome, t, k))
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return n
}

func arg(args []string, i int, fallback string) string {
	if i < len(args) {
		return args[i]
	}
	return fallback
}

func reverse(b []byte) []byte {
	r := make([]byte, len(b))
	for i, c := range b {
		r[len(b)-1-i] = c
	}
	return r
}

type command func(ctx context.Context, args []string) error

var clients = map[string]map[string]command{
	"franz":          franzCommands,
	"sarama":         saramaCommands,
	"sarama-default": saramaCommands, // sarama at its default Config.Version, as many applications leave it
	"kafkago":        kafkaGoCommands,
	"http":           httpCommands, // the control endpoint (control.go), not a Kafka client
}

func run(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: goclients CLIENT COMMAND ARGS... [-- ...]")
	}
	commands, ok := clients[args[0]]
	if !ok {
		return fmt.Errorf("unknown client %q", args[0])
	}
	cmd, ok := commands[args[1]]
	if !ok {
		return fmt.Errorf("client %s has no command %q", args[0], args[1])
	}
	saramaDefaultVersion = args[0] == "sarama-default"
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return cmd(ctx, args[2:])
}

func main() {
	var groups [][]string
	current := []string{}
	for _, a := range os.Args[1:] {
		if a == "--" {
			groups = append(groups, current)
			current = []string{}
			continue
		}
		current = append(current, a)
	}
	groups = append(groups, current)
	for _, g := range groups {
		started := time.Now()
		if err := run(g); err != nil {
			emit(map[string]any{"type": "error", "command": strings.Join(g, " "), "error": err.Error()})
			os.Exit(1)
		}
		emit(map[string]any{"type": "done", "command": strings.Join(g[:min(2, len(g))], " "),
			"ms": time.Since(started).Milliseconds()})
	}
}
