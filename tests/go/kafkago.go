package main

// segmentio's kafka-go (github.com/segmentio/kafka-go): Writer, Reader (by partition and in a group).

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

var kafkaGoCommands = map[string]command{
	"produce":       kafkaGoProduce,
	"consume":       kafkaGoConsume,
	"group-consume": kafkaGoGroupConsume,
}

func kafkaGoDialer() *kafka.Dialer {
	return &kafka.Dialer{ClientID: "mb-kafkago", Timeout: 10 * time.Second, DualStack: true}
}

func kafkaGoProduce(ctx context.Context, args []string) error {
	topic, partitions, count, first := args[1], atoi(args[2]), atoi(args[3]), atoi(arg(args, 4, "0"))
	codecs := map[string]kafka.Compression{"none": 0, "gzip": kafka.Gzip, "snappy": kafka.Snappy, "lz4": kafka.Lz4,
		"zstd": kafka.Zstd}
	codec, ok := codecs[arg(args, 5, "none")] // kafka-go's default: none
	if !ok {
		return fmt.Errorf("unknown compression %q", args[5])
	}
	w := &kafka.Writer{
		Compression: codec,
		Addr:        kafka.TCP(args[0]), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond, BatchSize: 500,
		Transport: &kafka.Transport{ClientID: "mb-kafkago"},
		// Record i -> partition i % n: the index is in the key, "key-<i>".
		Balancer: kafka.BalancerFunc(func(m kafka.Message, available ...int) int {
			i, _ := strconv.Atoi(strings.TrimPrefix(string(m.Key), "key-"))
			return i % partitions
		}),
	}
	defer w.Close()
	messages := make([]kafka.Message, 0, count)
	for i := first; i < first+count; i++ {
		key, value, headers := testRecord(i)
		m := kafka.Message{Key: key, Value: value}
		for _, h := range headers {
			m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
		}
		messages = append(messages, m)
	}
	if err := w.WriteMessages(ctx, messages...); err != nil {
		return err
	}
	emit(map[string]any{"type": "produced-all", "count": count})
	return nil
}

func kafkaGoHeaders(m kafka.Message) []header {
	hs := make([]header, 0, len(m.Headers))
	for _, h := range m.Headers {
		hs = append(hs, header{h.Key, h.Value})
	}
	return hs
}

func kafkaGoConsume(ctx context.Context, args []string) error {
	topic, partitions, count := args[1], atoi(args[2]), atoi(args[3])
	isolation := kafka.ReadUncommitted
	if arg(args, 4, "") == "read_committed" {
		isolation = kafka.ReadCommitted
	}
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	seen := 0
	var wg sync.WaitGroup
	failures := make(chan error, partitions)
	for p := 0; p < partitions; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{args[0]}, Topic: topic, Partition: p,
			Dialer: kafkaGoDialer(), MaxWait: 200 * time.Millisecond, IsolationLevel: isolation})
		if err := r.SetOffset(kafka.FirstOffset); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(readCtx)
				if err != nil {
					if readCtx.Err() == nil || ctx.Err() != nil {
						failures <- err
					}
					return
				}
				emitRecord("kafkago", "", m.Topic, int32(m.Partition), m.Offset, m.Key, m.Value, kafkaGoHeaders(m))
				mu.Lock()
				if seen++; seen == count {
					stop()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-failures:
		return fmt.Errorf("%d of %d records: %w", seen, count, err)
	default:
	}
	return nil
}

func kafkaGoGroupConsume(ctx context.Context, args []string) error {
	topic, group, count := args[1], args[2], atoi(args[3])
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{args[0]}, Topic: topic, GroupID: group,
		Dialer: kafkaGoDialer(), MaxWait: 200 * time.Millisecond, StartOffset: kafka.FirstOffset,
		SessionTimeout: 10 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
		RebalanceTimeout: 10 * time.Second, CommitInterval: 0})
	messages := make([]kafka.Message, 0, count)
	for len(messages) < count {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			r.Close()
			return fmt.Errorf("%d of %d records: %w", len(messages), count, err)
		}
		emitRecord("kafkago", "", m.Topic, int32(m.Partition), m.Offset, m.Key, m.Value, kafkaGoHeaders(m))
		messages = append(messages, m)
	}
	if err := r.CommitMessages(ctx, messages...); err != nil {
		r.Close()
		return fmt.Errorf("commit: %w", err)
	}
	emit(map[string]any{"type": "committed"})
	return r.Close() // leaves the group
}
