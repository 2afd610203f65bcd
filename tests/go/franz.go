package main

// franz-go (github.com/twmb/franz-go): kgo for producing and consuming, kadm for admin calls.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var franzCommands = map[string]command{
	"create-topic":   franzCreateTopic,
	"produce":        franzProduce,
	"consume":        franzConsume,
	"group-consume":  franzGroupConsume,
	"group":          franzGroup,
	"txn-produce":    franzTxnProduce,
	"eos":            franzEOS,
	"describe-group": franzDescribeGroup,
}

func franzClient(bootstrap string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.ClientID("mb-franz"),
		kgo.RequiredAcks(kgo.AllISRAcks())}
	return kgo.NewClient(append(base, opts...)...)
}

// Short group timeouts, as tests use (the broker's group.min.session.timeout.ms allows them).
func franzGroupOpts(group string, protocol string) []kgo.Opt {
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond), kgo.RebalanceTimeout(10 * time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	if protocol == "consumer" {
		// KIP-848: the broker assigns partitions (ConsumerGroupHeartbeat).
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.CooperativeStickyBalancer()))
	}
	return opts
}

func franzCreateTopic(ctx context.Context, args []string) error {
	cl, err := franzClient(args[0])
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(atoi(args[2])), 1, nil, args[1])
	if err != nil {
		return err
	}
	emit(map[string]any{"type": "created", "topic": resp.Topic, "partitions": resp.NumPartitions,
		"topic_id": resp.ID.String()})
	return nil
}

func franzProduce(ctx context.Context, args []string) error {
	topic, partitions, count, first := args[1], atoi(args[2]), atoi(args[3]), atoi(arg(args, 4, "0"))
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	codec, ok := codecs[arg(args, 5, "snappy")] // franz-go's default: snappy
	if !ok {
		return fmt.Errorf("unknown compression %q", args[5])
	}
	// Idempotent by default in franz-go (acks=all); the manual partitioner honours Record.Partition.
	cl, err := franzClient(args[0], kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchCompression(codec))
	if err != nil {
		return err
	}
	defer cl.Close()
	return franzProduceWith(ctx, cl, topic, partitions, count, first)
}

func franzProduceWith(ctx context.Context, cl *kgo.Client, topic string, partitions, count, first int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failure error
	for i := first; i < first+count; i++ {
		key, value, headers := testRecord(i)
		r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Key: key, Value: value}
		for _, h := range headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		wg.Add(1)
		index := i
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				failure = fmt.Errorf("record %d: %w", index, err)
				mu.Unlock()
				return
			}
			emit(map[string]any{"type": "produced", "index": index, "partition": r.Partition, "offset": r.Offset})
		})
	}
	wg.Wait()
	return failure
}

func franzRecordHeaders(r *kgo.Record) []header {
	hs := make([]header, 0, len(r.Headers))
	for _, h := range r.Headers {
		hs = append(hs, header{h.Key, h.Value})
	}
	return hs
}

func franzConsume(ctx context.Context, args []string) error {
	topic, partitions, count := args[1], atoi(args[2]), atoi(args[3])
	offsets := map[int32]kgo.Offset{}
	for p := 0; p < partitions; p++ {
		offsets[int32(p)] = kgo.NewOffset().AtStart()
	}
	opts := []kgo.Opt{kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	if arg(args, 4, "") == "read_committed" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := franzClient(args[0], opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for seen := 0; seen < count; {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d records: %w", seen, count, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			seen++
			emitRecord("franz", "", r.Topic, r.Partition, r.Offset, r.Key, r.Value, franzRecordHeaders(r))
		})
	}
	return nil
}

func franzGroupConsume(ctx context.Context, args []string) error {
	topic, group, count := args[1], args[2], atoi(args[3])
	opts := append(franzGroupOpts(group, arg(args, 4, "classic")), kgo.ConsumeTopics(topic))
	cl, err := franzClient(args[0], opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for seen := 0; seen < count; {
		fetches := cl.PollRecords(ctx, count-seen)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d records: %w", seen, count, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			seen++
			emitRecord("franz", "", r.Topic, r.Partition, r.Offset, r.Key, r.Value, franzRecordHeaders(r))
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	_, generation := cl.GroupMetadata()
	emit(map[string]any{"type": "committed", "generation": generation})
	return cl.LeaveGroupContext(ctx)
}

// franzGroup: MEMBERS consumers in one group; records are produced once every partition is owned.
func franzGroup(ctx context.Context, args []string) error {
	bootstrap, topic, group := args[0], args[1], args[2]
	members, partitions, count := atoi(args[3]), atoi(args[4]), atoi(args[5])
	protocol := arg(args, 6, "classic")

	var mu sync.Mutex
	owner := map[int32]int{} // partition -> member
	seen := 0
	done := make(chan struct{})
	clients := make([]*kgo.Client, members)
	for m := 0; m < members; m++ {
		member := m
		opts := append(franzGroupOpts(group, protocol), kgo.ConsumeTopics(topic),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range assigned[topic] {
					owner[p] = member
					emit(map[string]any{"type": "assigned", "member": member, "partition": p})
				}
			}),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
				// Commit what was read before the partitions move (cooperative: only these).
				if err := cl.CommitUncommittedOffsets(ctx); err != nil {
					emit(map[string]any{"type": "commit-failed", "member": member, "error": err.Error()})
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range revoked[topic] {
					if owner[p] == member {
						delete(owner, p)
					}
					emit(map[string]any{"type": "revoked", "member": member, "partition": p})
				}
			}))
		cl, err := franzClient(bootstrap, opts...)
		if err != nil {
			return err
		}
		defer cl.Close()
		clients[m] = cl
	}
	var wg sync.WaitGroup
	failures := make(chan error, members)
	for m, cl := range clients {
		wg.Add(1)
		go func(member int, cl *kgo.Client) {
			defer wg.Done()
			for {
				select {
				case <-done:
					if err := cl.CommitUncommittedOffsets(ctx); err != nil {
						failures <- fmt.Errorf("member %d commit: %w", member, err)
					}
					return
				default:
				}
				pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				fetches := cl.PollFetches(pollCtx)
				cancel()
				if ctx.Err() != nil {
					failures <- fmt.Errorf("member %d: %w", member, ctx.Err())
					return
				}
				for _, e := range fetches.Errors() {
					if e.Err != context.DeadlineExceeded {
						failures <- fmt.Errorf("member %d fetch %s[%d]: %w", member, e.Topic, e.Partition, e.Err)
						return
					}
				}
				fetches.EachRecord(func(r *kgo.Record) {
					emitRecord("franz", fmt.Sprint(member), r.Topic, r.Partition, r.Offset, r.Key, r.Value,
						franzRecordHeaders(r))
					mu.Lock()
					seen++
					if seen == count {
						close(done)
					}
					mu.Unlock()
				})
			}
		}(m, cl)
	}
	// Every partition owned, by as many members as can have one: the group is stable.
	for {
		mu.Lock()
		owners := map[int]bool{}
		for _, m := range owner {
			owners[m] = true
		}
		stable := len(owner) == partitions && len(owners) == min(members, partitions)
		mu.Unlock()
		if stable {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the group did not assign every partition: %w", ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	emit(map[string]any{"type": "stable"})
	producer, err := franzClient(bootstrap, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer producer.Close()
	if err := franzProduceWith(ctx, producer, topic, partitions, count, 0); err != nil {
		return err
	}
	wg.Wait()
	select {
	case err := <-failures:
		return err
	default:
	}
	for _, cl := range clients {
		if err := cl.LeaveGroupContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

func franzTxnProduce(ctx context.Context, args []string) error {
	topic, txnID := args[1], args[2]
	steps, err := parsePlan(args[3])
	if err != nil {
		return err
	}
	cl, err := franzClient(args[0], kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	for t, s := range steps {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("transaction %d begin: %w", t, err)
		}
		for k := 0; k < s.count; k++ {
			key, value := txnRecord(t, k, s.outcome)
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Key: key, Value: value}).FirstErr(); err != nil {
				return fmt.Errorf("transaction %d record %d: %w", t, k, err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(s.outcome == "commit")); err != nil {
			return fmt.Errorf("transaction %d %s: %w", t, s.outcome, err)
		}
		emit(map[string]any{"type": "txn", "index": t, "outcome": s.outcome, "records": s.count})
	}
	return nil
}

func franzEOS(ctx context.Context, args []string) error {
	in, outTopic, group, txnID, count := args[1], args[2], args[3], args[4], atoi(args[5])
	opts := append(franzGroupOpts(group, "classic"), kgo.SeedBrokers(args[0]), kgo.ClientID("mb-franz"),
		kgo.ConsumeTopics(in), kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(outTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.TransactionTimeout(30*time.Second))
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return err
	}
	defer sess.Close()
	for seen := 0; seen < count; {
		fetches := sess.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d records: %w", seen, count, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n := 0
		var produceErr error
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			if produceErr == nil {
				produceErr = sess.ProduceSync(ctx, &kgo.Record{Partition: 0, Key: r.Key, Value: reverse(r.Value)}).FirstErr()
			}
		})
		committed, err := sess.End(ctx, kgo.TransactionEndTry(produceErr == nil))
		if err != nil {
			return fmt.Errorf("end: %w", err)
		}
		if produceErr != nil {
			return fmt.Errorf("produce: %w", produceErr)
		}
		emit(map[string]any{"type": "txn", "records": n, "committed": committed})
		if committed {
			seen += n
		}
	}
	return nil
}

func franzDescribeGroup(ctx context.Context, args []string) error {
	cl, err := franzClient(args[0])
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	described, err := adm.DescribeGroups(ctx, args[1])
	if err != nil {
		return err
	}
	g := described[args[1]]
	if g.Err != nil {
		return g.Err
	}
	emit(map[string]any{"type": "group", "group": g.Group, "state": g.State, "protocol_type": g.ProtocolType,
		"members": len(g.Members)})
	offsets, err := adm.FetchOffsets(ctx, args[1])
	if err != nil {
		return err
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		emit(map[string]any{"type": "offset", "topic": o.Topic, "partition": o.Partition, "offset": o.At,
			"error": fmt.Sprint(o.Err)})
	})
	return nil
}
