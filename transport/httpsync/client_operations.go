package httpsync

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// OperationsClient is a Go client of POST <mount>/operations (remote
// operations, REMOTE.md revision 1): Query runs a registered query,
// Command a registered command, one operation per request. Its zero
// value is not usable: URL and ClientID are required.
type OperationsClient struct {
	// URL is the full endpoint, e.g. http://127.0.0.1:8787/operations.
	URL string
	// HTTP is the HTTP client (default http.DefaultClient).
	HTTP *http.Client
	// Header is added to every request (authentication headers).
	Header http.Header
	// ClientID is sent as the request's clientId (required).
	ClientID string
}

// QueryAnswer is a query's rows and the partition's maxCommitSeq.
type QueryAnswer struct {
	// Rows are the result rows, each an ordered object of column → value
	// (REMOTE.md's tagged values decoded).
	Rows []opwire.Object
	// MaxCommitSeq is the partition's newest commit seq the rows reflect.
	MaxCommitSeq int64
}

// CommandAnswer is a command's outcome.
type CommandAnswer struct {
	Status    string // opwire.StatusApplied, StatusCached or StatusRejected
	CommitSeq int64  // 0 when rejected
	// Results are the command's per-operation results as the server
	// encoded them (decoded JSON values).
	Results []any
}

// Query runs the registered query operationID with params (any value
// opwire.Encode accepts; nil for none). Failures are *syncerr.Error with
// the server's code.
func (c *OperationsClient) Query(ctx context.Context, operationID string, params any) (*QueryAnswer, error) {
	o, err := c.call(ctx, opwire.Object{{Key: "revision", Value: 1.0}, {Key: "kind", Value: opwire.KindQuery},
		{Key: "clientId", Value: c.ClientID}, {Key: "operationId", Value: operationID}, {Key: "params", Value: params}})
	if err != nil {
		return nil, err
	}
	rows, _ := get(o, "rows").([]any)
	seq, ok := opwire.SafeNumber(get(o, "maxCommitSeq"))
	if get(o, "kind") != opwire.KindQuery || !ok {
		return nil, fmt.Errorf("httpsync: malformed query response")
	}
	a := &QueryAnswer{MaxCommitSeq: seq, Rows: make([]opwire.Object, len(rows))}
	for i, r := range rows {
		if a.Rows[i], ok = r.(opwire.Object); !ok {
			return nil, fmt.Errorf("httpsync: query response row %d is not an object", i)
		}
	}
	return a, nil
}

// Command invokes the registered command operationID once per requestID
// (retrying with the same requestID replays the stored outcome).
func (c *OperationsClient) Command(ctx context.Context, operationID, requestID string, params any) (*CommandAnswer, error) {
	o, err := c.call(ctx, opwire.Object{{Key: "revision", Value: 1.0}, {Key: "kind", Value: opwire.KindCommand},
		{Key: "clientId", Value: c.ClientID}, {Key: "operationId", Value: operationID}, {Key: "requestId", Value: requestID},
		{Key: "params", Value: params}})
	if err != nil {
		return nil, err
	}
	status, _ := get(o, "status").(string)
	if get(o, "kind") != opwire.KindCommand || status == "" {
		return nil, fmt.Errorf("httpsync: malformed command response")
	}
	a := &CommandAnswer{Status: status}
	a.Results, _ = get(o, "results").([]any)
	if v, ok := o.Get("commitSeq"); ok {
		a.CommitSeq, _ = opwire.SafeNumber(v)
	}
	return a, nil
}

func get(o opwire.Object, k string) any {
	v, _ := o.Get(k)
	return v
}

func (c *OperationsClient) call(ctx context.Context, msg opwire.Object) (opwire.Object, error) {
	body, err := opwire.Encode(msg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", opwire.ContentType)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("httpsync: read operation response: %w", err)
	}
	if mediaType(res.Header.Get("Content-Type")) != opwire.ContentType {
		var eb httperr.Body
		if json.Unmarshal(data, &eb) == nil && eb.Code != "" {
			return nil, &syncerr.Error{Code: syncerr.Code(eb.Code), Message: eb.Message, Details: eb.Details,
				Err: fmt.Errorf("HTTP %d", res.StatusCode)}
		}
		return nil, fmt.Errorf("httpsync: operation HTTP %d: %s", res.StatusCode, bytes.TrimSpace(data))
	}
	v, err := opwire.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("httpsync: operation response: %w", err)
	}
	o, ok := v.(opwire.Object)
	if !ok {
		return nil, fmt.Errorf("httpsync: operation response is not an object")
	}
	if get(o, "kind") == opwire.KindError {
		code, _ := get(o, "code").(string)
		msg, _ := get(o, "message").(string)
		return nil, &syncerr.Error{Code: syncerr.Code(code), Message: msg, Err: fmt.Errorf("HTTP %d", res.StatusCode)}
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("httpsync: operation HTTP %d without an error object", res.StatusCode)
	}
	return o, nil
}
