package main

// http control URL METHOD PATH [JSON]: one call of minibroker's control endpoint (docs/control.md),
// with net/http from the standard library only, as a Go test would drive it; prints
// {"type": "control", "status": N, "answer": <the endpoint's JSON>}.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

var httpCommands = map[string]command{"control": controlCall}

func controlCall(ctx context.Context, args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: http control URL METHOD PATH [JSON]")
	}
	var body io.Reader
	if len(args) > 3 && args[3] != "" {
		body = strings.NewReader(args[3])
	}
	req, err := http.NewRequestWithContext(ctx, args[1], strings.TrimRight(args[0], "/")+args[2], body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var answer any
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("control %s %s: the answer is not JSON: %q", args[1], args[2], raw)
	}
	emit(map[string]any{"type": "control", "status": resp.StatusCode, "answer": answer})
	return nil
}
