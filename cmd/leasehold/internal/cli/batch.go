package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/leasehold/leasehold/internal/jsonkeys"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// batchStdin is what `submit --batch -` reads (a variable so tests can
// feed it).
var batchStdin io.Reader = os.Stdin

// batchLineBytesMax bounds one line: the largest payload, escaped at
// worst, and the other fields.
const batchLineBytesMax = 2*model.PayloadBytesMax + 4096

// readBatch reads JSON lines (blank lines skipped) into requests, with the
// line number of each. More than SubmitBatchMax requests is refused,
// naming the limit.
func readBatch(name string, r io.Reader) ([]model.SubmitRequest, []int, error) {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), batchLineBytesMax)
	var reqs []model.SubmitRequest
	var lines []int
	number := 0
	for scanner.Scan() {
		number++
		text := bytes.TrimSpace(scanner.Bytes())
		if len(text) == 0 {
			continue
		}
		if len(reqs) == queue.SubmitBatchMax {
			return nil, nil, badUsage("--batch: %s has more than %d requests, the limit of one batch (SubmitBatchMax)", name, queue.SubmitBatchMax)
		}
		req, err := parseBatchLine(text)
		if err != nil {
			return nil, nil, fmt.Errorf("--batch: %s line %d: %w", name, number, err)
		}
		reqs, lines = append(reqs, req), append(lines, number)
	}
	if err := scanner.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, badUsage("--batch: %s line %d is longer than %d bytes", name, number+1, batchLineBytesMax)
		}
		return nil, nil, fmt.Errorf("--batch: read %s: %w", name, err)
	}
	if len(reqs) == 0 {
		return nil, nil, badUsage("--batch: %s holds no requests", name)
	}
	return reqs, lines, nil
}

func parseBatchLine(text []byte) (model.SubmitRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	var b wire.SubmitRequest // a line is the HTTP API's submit body
	if err := dec.Decode(&b); err != nil {
		return model.SubmitRequest{}, badUsage("not a JSON object of the submit fields: %v", err)
	}
	if dec.More() {
		return model.SubmitRequest{}, badUsage("more than one JSON value")
	}
	var dup *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(text), &dup) {
		return model.SubmitRequest{}, badUsage("%v", dup)
	}
	req, err := b.Model()
	if err != nil {
		return model.SubmitRequest{}, err
	}
	return req, nil
}

// submitBatch is `submit --batch FILE|-`: every request validated before
// the database is opened, then one SubmitMany (one transaction). It prints
// each request's task ID in order (with --json, one record a line). A
// progress line goes to standard error only when it is a terminal.
func submitBatch(e *env, c common, name string) int {
	in := batchStdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fail(e, "submit", badUsage("--batch: %v", err))
		}
		defer f.Close()
		in = f
	}
	reqs, lines, err := readBatch(name, in)
	if err != nil {
		return fail(e, "submit", err)
	}
	defaults, err := c.defaults()
	if err != nil {
		return fail(e, "submit", err)
	}
	for i, req := range reqs {
		n, err := model.NormalizeWith(req, defaults)
		if err == nil {
			err = model.CheckCallerKey(n.Key)
		}
		if err == nil {
			err = checkIntakePayload(c, n.Kind, n.Payload)
		}
		if err != nil {
			return fail(e, "submit", fmt.Errorf("--batch: %s line %d: %w", name, lines[i], err))
		}
	}
	progress := isTerminal(e.stderr)
	if progress {
		fmt.Fprintf(e.stderr, "submitting %d requests from %s in one transaction...\n", len(reqs), name)
	}
	q, err := openExisting(e.ctx, c)
	if err != nil {
		return fail(e, "submit", err)
	}
	defer q.Close()
	res, err := q.SubmitMany(e.ctx, reqs)
	var item *model.BatchItemError
	if errors.As(err, &item) {
		err = fmt.Errorf("--batch: %s line %d: %w", name, lines[item.Index], item.Err)
	}
	if err != nil {
		return fail(e, "submit", err)
	}
	replays := 0
	for _, r := range res {
		if r.Replay {
			replays++
		}
		if *c.json {
			printJSON(e.stdout, wire.SubmitResultOf(r))
			continue
		}
		fmt.Fprintln(e.stdout, r.TaskID)
	}
	if progress {
		fmt.Fprintf(e.stderr, "submitted %d requests: %d new tasks, %d replays\n", len(res), len(res)-replays, replays)
	}
	return exitOK
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
