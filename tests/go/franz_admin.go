package main

// franz-go's kadm admin client, one call after another on a topic, a group and a transactional id
// the test made: `franz admin BOOTSTRAP TOPIC GROUP TXN_ID SPARE_TOPIC`. Each call prints
// {"type": "admin", "call": NAME, "error": ERR or "", "result": {...}}; a call's error is reported,
// not fatal, so the test sees every call's outcome in one run.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func init() { franzCommands["admin"] = franzAdmin }

func adminLine(call string, err error, result map[string]any) {
	line := map[string]any{"type": "admin", "call": call, "error": "", "result": result}
	if err != nil {
		line["error"] = err.Error()
	}
	emit(line)
}

// firstErr is the request's error, else the first per-item error kadm reports.
func firstErr(err error, items ...error) error {
	if err != nil {
		return err
	}
	for _, e := range items {
		if e != nil {
			return e
		}
	}
	return nil
}

func offsetsOf(listed kadm.ListedOffsets, topic string) (map[string]int64, error) {
	out := map[string]int64{}
	var err error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Topic == topic {
			out[fmt.Sprint(o.Partition)] = o.Offset
			if o.Err != nil && err == nil {
				err = o.Err
			}
		}
	})
	return out, err
}

func franzAdmin(ctx context.Context, args []string) error {
	topic, group, txnID, spare := args[1], args[2], args[3], args[4]
	cl, err := franzClient(args[0])
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(10000)

	brokers, err := adm.ListBrokers(ctx)
	adminLine("ListBrokers", err, map[string]any{"brokers": len(brokers)})

	topics, err := adm.ListTopics(ctx)
	adminLine("ListTopics", firstErr(err, topics.Error()), map[string]any{"has_topic": topics.Has(topic),
		"partitions": len(topics[topic].Partitions)})

	versions, err := adm.ApiVersions(ctx)
	keys := 0
	versions.Each(func(v kadm.BrokerApiVersions) { keys += len(v.Raw().ApiKeys) })
	adminLine("ApiVersions", err, map[string]any{"api_keys": keys})

	retention := "86400000"
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms",
		Value: &retention}}, topic)
	var alterErrs []error
	for _, a := range altered {
		alterErrs = append(alterErrs, a.Err)
	}
	adminLine("AlterTopicConfigs", firstErr(err, alterErrs...), nil)

	described, err := adm.DescribeTopicConfigs(ctx, topic)
	value, source := "", ""
	var describeErrs []error
	for _, rc := range described {
		describeErrs = append(describeErrs, rc.Err)
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.Value != nil {
				value, source = *c.Value, c.Source.String()
			}
		}
	}
	adminLine("DescribeTopicConfigs", firstErr(err, describeErrs...), map[string]any{"retention.ms": value,
		"source": source})

	brokerConfigs, err := adm.DescribeBrokerConfigs(ctx)
	count := 0
	for _, rc := range brokerConfigs {
		count += len(rc.Configs)
	}
	adminLine("DescribeBrokerConfigs", err, map[string]any{"configs": count})

	listed, err := adm.ListConfigResources(ctx)
	adminLine("ListConfigResources", firstErr(err, listed.Err), map[string]any{"resources": len(listed.Resources)})

	for _, l := range []struct {
		name string
		fn   func(context.Context, ...string) (kadm.ListedOffsets, error)
	}{{"ListStartOffsets", adm.ListStartOffsets}, {"ListEndOffsets", adm.ListEndOffsets},
		{"ListMaxTimestampOffsets", adm.ListMaxTimestampOffsets}, {"ListCommittedOffsets", adm.ListCommittedOffsets}} {
		offs, err := l.fn(ctx, topic)
		result, itemErr := offsetsOf(offs, topic)
		adminLine(l.name, firstErr(err, itemErr), map[string]any{"offsets": result})
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-time.Hour).UnixMilli(), topic)
	result, itemErr := offsetsOf(after, topic)
	adminLine("ListOffsetsAfterMilli", firstErr(err, itemErr), map[string]any{"offsets": result})

	toDelete := kadm.Offsets{}
	toDelete.AddOffset(topic, 0, 2, -1)
	deleted, err := adm.DeleteRecords(ctx, toDelete)
	low := int64(-1)
	var deleteErrs []error
	deleted.Each(func(d kadm.DeleteRecordsResponse) { low = d.LowWatermark; deleteErrs = append(deleteErrs, d.Err) })
	adminLine("DeleteRecords", firstErr(err, deleteErrs...), map[string]any{"low_watermark": low})

	created, err := adm.CreatePartitions(ctx, 1, topic)
	var createErrs []error
	for _, c := range created {
		createErrs = append(createErrs, c.Err)
	}
	adminLine("CreatePartitions", firstErr(err, createErrs...), nil)

	groups, err := adm.ListGroups(ctx)
	adminLine("ListGroups", err, map[string]any{"has_group": groups[group].Group == group,
		"state": groups[group].State})

	lag, err := adm.Lag(ctx, group)
	total := int64(0)
	var lagErr error
	for _, g := range lag {
		lagErr = firstErr(lagErr, g.Error())
		total += g.Lag.Total()
	}
	adminLine("Lag", firstErr(err, lagErr), map[string]any{"total": total})

	offsets, err := adm.FetchOffsets(ctx, group)
	adminLine("FetchOffsets", firstErr(err, offsets.Error()), map[string]any{"partitions": len(offsets[topic])})

	deletedOffsets, err := adm.DeleteOffsets(ctx, group, kadm.TopicsSet{topic: {1: {}}})
	adminLine("DeleteOffsets", firstErr(err, deletedOffsets.Error()), nil)

	deletedGroup, err := adm.DeleteGroup(ctx, group)
	adminLine("DeleteGroup", firstErr(err, deletedGroup.Err), nil)

	rate := 1024.0
	quotaEntity := []kadm.ClientQuotaEntityComponent{{Type: "client-id", Name: &txnID}}
	_, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: quotaEntity,
		Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: rate}}}})
	adminLine("AlterClientQuotas", err, nil)
	quotas, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "client-id",
		MatchName: &txnID, MatchType: 0}})
	got := 0.0
	for _, q := range quotas {
		for _, v := range q.Values {
			if v.Key == "producer_byte_rate" {
				got = v.Value
			}
		}
	}
	adminLine("DescribeClientQuotas", err, map[string]any{"producer_byte_rate": got})

	_, err = adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "go-user", Mechanism: kadm.ScramSha256,
		Iterations: 4096, Password: "go-password"}})
	adminLine("AlterUserSCRAMs", err, nil)
	scrams, err := adm.DescribeUserSCRAMs(ctx, "go-user")
	adminLine("DescribeUserSCRAMs", firstErr(err, scrams.Error()), map[string]any{
		"credentials": len(scrams["go-user"].CredInfos)})

	txns, err := adm.ListTransactions(ctx, nil, nil)
	adminLine("ListTransactions", err, map[string]any{"has_txn": txns[txnID].TxnID == txnID,
		"state": txns[txnID].State})
	describedTxns, err := adm.DescribeTransactions(ctx, txnID)
	adminLine("DescribeTransactions", firstErr(err, describedTxns[txnID].Err), map[string]any{
		"state": describedTxns[txnID].State})
	producers, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
	active := 0
	producers.EachPartition(func(p kadm.DescribedProducersPartition) { active += len(p.ActiveProducers) })
	adminLine("DescribeProducers", err, map[string]any{"active": active})

	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	var dirErr error
	dirCount := 0
	dirs.Each(func(d kadm.DescribedLogDir) { dirCount++; dirErr = firstErr(dirErr, d.Err) })
	adminLine("DescribeAllLogDirs", firstErr(err, dirErr), map[string]any{"dirs": dirCount})

	_, err = adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}}})
	adminLine("ListPartitionReassignments", err, nil)

	elected, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
	var electErr error
	for _, ps := range elected {
		for _, r := range ps {
			// Already the preferred leader is the answer for a single broker.
			if r.Err != nil && !errors.Is(r.Err, kerr.ElectionNotNeeded) {
				electErr = firstErr(electErr, r.Err)
			}
		}
	}
	adminLine("ElectLeaders", firstErr(err, electErr), nil)

	deletedTopics, err := adm.DeleteTopics(ctx, spare)
	adminLine("DeleteTopics", firstErr(err, deletedTopics.Error()), nil)

	return nil
}
