package main

// IBM's sarama (github.com/IBM/sarama), configured for the newest protocol versions it speaks, or
// left at its default Config.Version (sarama picks request versions from Config.Version rather than
// from ApiVersions alone).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

var saramaCommands = map[string]command{
	"create-topic":  saramaCreateTopic,
	"produce":       saramaProduce,
	"consume":       saramaConsume,
	"group-consume": saramaGroupConsume,
	"group":         saramaGroup,
	"txn-produce":   saramaTxnProduce,
}

// saramaDefaultVersion: leave Config.Version at sarama's default (the "sarama-default" client).
var saramaDefaultVersion bool

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	if !saramaDefaultVersion {
		c.Version = sarama.MaxVersion
	}
	c.ClientID = "mb-sarama"
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.MaxWaitTime = 200 * time.Millisecond
	c.Consumer.Group.Session.Timeout = 10 * time.Second
	c.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	c.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	c.Consumer.Offsets.AutoCommit.Enable = false
	c.Metadata.Retry.Backoff = 100 * time.Millisecond
	return c
}

// The idempotent producer: sarama requires acks=all and one request in flight per broker.
func saramaIdempotent(c *sarama.Config) {
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
}

func saramaCreateTopic(ctx context.Context, args []string) error {
	admin, err := sarama.NewClusterAdmin([]string{args[0]}, saramaConfig())
	if err != nil {
		return err
	}
	defer admin.Close()
	partitions := int32(atoi(args[2]))
	if err := admin.CreateTopic(args[1], &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		return err
	}
	emit(map[string]any{"type": "created", "topic": args[1], "partitions": partitions})
	return nil
}

func saramaMessage(topic string, i, partitions int) *sarama.ProducerMessage {
	key, value, headers := testRecord(i)
	m := &sarama.ProducerMessage{Topic: topic, Partition: int32(i % partitions), Key: sarama.ByteEncoder(key),
		Value: sarama.ByteEncoder(value), Metadata: i}
	for _, h := range headers {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	return m
}

func saramaProduce(ctx context.Context, args []string) error {
	topic, partitions, count, first := args[1], atoi(args[2]), atoi(args[3]), atoi(arg(args, 4, "0"))
	c := saramaConfig()
	saramaIdempotent(c)
	codecs := map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD}
	codec, ok := codecs[arg(args, 5, "none")] // sarama's default: none
	if !ok {
		return fmt.Errorf("unknown compression %q", args[5])
	}
	c.Producer.Compression = codec
	producer, err := sarama.NewSyncProducer([]string{args[0]}, c)
	if err != nil {
		return err
	}
	defer producer.Close()
	return saramaSend(producer, topic, partitions, count, first)
}

func saramaSend(producer sarama.SyncProducer, topic string, partitions, count, first int) error {
	messages := make([]*sarama.ProducerMessage, 0, count)
	for i := first; i < first+count; i++ {
		messages = append(messages, saramaMessage(topic, i, partitions))
	}
	if err := producer.SendMessages(messages); err != nil {
		var errs sarama.ProducerErrors
		if errors.As(err, &errs) && len(errs) > 0 {
			return fmt.Errorf("%d records failed, the first (record %v): %w", len(errs), errs[0].Msg.Metadata, errs[0].Err)
		}
		return err
	}
	for _, m := range messages {
		emit(map[string]any{"type": "produced", "index": m.Metadata, "partition": m.Partition, "offset": m.Offset})
	}
	return nil
}

func saramaHeaders(m *sarama.ConsumerMessage) []header {
	hs := make([]header, 0, len(m.Headers))
	for _, h := range m.Headers {
		hs = append(hs, header{string(h.Key), h.Value})
	}
	return hs
}

func saramaConsume(ctx context.Context, args []string) error {
	topic, partitions, count := args[1], atoi(args[2]), atoi(args[3])
	c := saramaConfig()
	if arg(args, 4, "") == "read_committed" {
		c.Consumer.IsolationLevel = sarama.ReadCommitted
	}
	consumer, err := sarama.NewConsumer([]string{args[0]}, c)
	if err != nil {
		return err
	}
	defer consumer.Close()
	messages := make(chan *sarama.ConsumerMessage)
	errs := make(chan error, partitions)
	for p := 0; p < partitions; p++ {
		pc, err := consumer.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			return err
		}
		defer pc.AsyncClose()
		go func() {
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					messages <- m
				case err, ok := <-pc.Errors():
					if ok {
						errs <- err
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for seen := 0; seen < count; seen++ {
		select {
		case m := <-messages:
			emitRecord("sarama", "", m.Topic, m.Partition, m.Offset, m.Key, m.Value, saramaHeaders(m))
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%d of %d records: %w", seen, count, ctx.Err())
		}
	}
	return nil
}

// saramaHandler reads claims, marking each message; the session commits in Cleanup (at every
// rebalance and at the end), as sarama's documentation has it with auto-commit off.
type saramaHandler struct {
	member  string
	onClaim func(session sarama.ConsumerGroupSession)
	onMsg   func() bool // false: COUNT was reached, the message is left unread (not marked)
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	if h.onClaim != nil {
		h.onClaim(s)
	}
	return nil
}

func (h *saramaHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	return nil
}

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if !h.onMsg() {
				return nil
			}
			s.MarkMessage(m, "")
			emitRecord("sarama", h.member, m.Topic, m.Partition, m.Offset, m.Key, m.Value, saramaHeaders(m))
		case <-s.Context().Done():
			return nil
		}
	}
}

// take counts one message read: false once COUNT were, and stop() at the COUNTth.
func take(mu *sync.Mutex, seen *int, count int, stop func()) bool {
	mu.Lock()
	defer mu.Unlock()
	if *seen == count {
		return false
	}
	if *seen++; *seen == count {
		stop()
	}
	return true
}

// saramaRun consumes with GROUP until ctx ends (one Consume call per rebalance, as sarama requires).
func saramaRun(ctx context.Context, group sarama.ConsumerGroup, topic string, h *saramaHandler) error {
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{topic}, h); err != nil {
			return err
		}
	}
	return nil
}

func saramaGroupConsume(ctx context.Context, args []string) error {
	topic, groupID, count := args[1], args[2], atoi(args[3])
	group, err := sarama.NewConsumerGroup([]string{args[0]}, groupID, saramaConfig())
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	seen := 0
	var mu sync.Mutex
	h := &saramaHandler{onMsg: func() bool { return take(&mu, &seen, count, stop) }}
	if err := saramaRun(runCtx, group, topic, h); err != nil {
		group.Close()
		return err
	}
	if err := group.Close(); err != nil { // leaves the group, after Cleanup committed
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%d of %d records: %w", seen, count, ctx.Err())
	}
	emit(map[string]any{"type": "committed"})
	return nil
}

func saramaGroup(ctx context.Context, args []string) error {
	bootstrap, topic, groupID := args[0], args[1], args[2]
	members, partitions, count := atoi(args[3]), atoi(args[4]), atoi(args[5])
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	claims := make([]map[string][]int32, members)
	seen := 0
	groups := make([]sarama.ConsumerGroup, members)
	failures := make(chan error, members)
	var wg sync.WaitGroup
	for m := 0; m < members; m++ {
		group, err := sarama.NewConsumerGroup([]string{bootstrap}, groupID, saramaConfig())
		if err != nil {
			return err
		}
		groups[m] = group
		member := m
		h := &saramaHandler{member: fmt.Sprint(m),
			onClaim: func(s sarama.ConsumerGroupSession) {
				mu.Lock()
				defer mu.Unlock()
				claims[member] = s.Claims()
				for _, p := range s.Claims()[topic] {
					emit(map[string]any{"type": "assigned", "member": member, "partition": p,
						"generation": s.GenerationID()})
				}
			},
			onMsg: func() bool { return take(&mu, &seen, count, stop) }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := saramaRun(runCtx, group, topic, h); err != nil {
				failures <- fmt.Errorf("member %d: %w", member, err)
			}
		}()
	}
	for {
		mu.Lock()
		owned, owners := map[int32]bool{}, 0
		for _, c := range claims {
			if len(c[topic]) > 0 {
				owners++
			}
			for _, p := range c[topic] {
				owned[p] = true
			}
		}
		total := 0
		for _, c := range claims {
			total += len(c[topic])
		}
		stable := len(owned) == partitions && total == partitions && owners == min(members, partitions)
		mu.Unlock()
		if stable {
			break
		}
		select {
		case err := <-failures:
			return err
		case <-ctx.Done():
			return fmt.Errorf("the group did not assign every partition: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	emit(map[string]any{"type": "stable"})
	c := saramaConfig()
	saramaIdempotent(c)
	producer, err := sarama.NewSyncProducer([]string{bootstrap}, c)
	if err != nil {
		return err
	}
	defer producer.Close()
	if err := saramaSend(producer, topic, partitions, count, 0); err != nil {
		return err
	}
	wg.Wait()
	for _, g := range groups {
		if err := g.Close(); err != nil {
			return err
		}
	}
	select {
	case err := <-failures:
		return err
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%d of %d records: %w", seen, count, ctx.Err())
	}
	return nil
}

func saramaTxnProduce(ctx context.Context, args []string) error {
	topic, txnID := args[1], args[2]
	steps, err := parsePlan(args[3])
	if err != nil {
		return err
	}
	c := saramaConfig()
	saramaIdempotent(c)
	c.Producer.Transaction.ID = txnID
	c.Producer.Transaction.Timeout = 30 * time.Second
	producer, err := sarama.NewSyncProducer([]string{args[0]}, c)
	if err != nil {
		return err
	}
	defer producer.Close()
	for t, s := range steps {
		if err := producer.BeginTxn(); err != nil {
			return fmt.Errorf("transaction %d begin: %w", t, err)
		}
		for k := 0; k < s.count; k++ {
			key, value := txnRecord(t, k, s.outcome)
			m := &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value)}
			if _, _, err := producer.SendMessage(m); err != nil {
				return fmt.Errorf("transaction %d record %d: %w", t, k, err)
			}
		}
		if s.outcome == "commit" {
			err = producer.CommitTxn()
		} else {
			err = producer.AbortTxn()
		}
		if err != nil {
			return fmt.Errorf("transaction %d %s: %w", t, s.outcome, err)
		}
		emit(map[string]any{"type": "txn", "index": t, "outcome": s.outcome, "records": s.count})
	}
	return nil
}
