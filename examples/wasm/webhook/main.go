// Command webhook is an example entity that calls out over HTTP: it posts a message's
// body to a URL and replies with the status the server answered.
//
// Messages: "post URL BODY" posts BODY (the rest of the message, possibly empty) to URL
// with the header Idempotency-Key set to "ENTITY-ID/N", N counting this entity's posts,
// and replies with the status, such as "200". "sent" replies with how many posts were
// answered. "panic" traps the instance on purpose (tests of recovery use it: the posts
// before it are not sent again, their answers come from the host's replay record).
//
// The entity type must allow the URL: shardhost deploy --egress http://host:port
// (docs/security.md, "Outbound HTTP"); without, every post fails with egress-denied.
//
// Build: tinygo build -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none -o webhook.wasm .
// or, with Go's port, GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o webhook.wasm .
// (make examples writes bin/wasm/webhook.wasm).
package main

import (
	"errors"
	"strconv"
	"strings"

	shardhost "github.com/shardhost/shardhost/guest-sdk/go"
)

type webhook struct{ sent int64 }

func (w *webhook) Receive(ctx *shardhost.Context, msg []byte) ([]byte, error) {
	verb, rest, _ := strings.Cut(string(msg), " ")
	switch verb {
	case "post":
		url, body, _ := strings.Cut(rest, " ")
		if url == "" {
			return nil, errors.New("webhook: post wants a URL: post URL BODY")
		}
		key := ctx.EntityID() + "/" + strconv.FormatInt(w.sent+1, 10)
		resp, err := ctx.HTTPDo(&shardhost.HTTPRequest{Method: "POST", URL: url, Body: []byte(body),
			Header: shardhost.Header{"Content-Type": {"text/plain"}, "Idempotency-Key": {key}}})
		if err != nil {
			return nil, err
		}
		w.sent++
		return strconv.AppendInt(nil, int64(resp.StatusCode), 10), nil
	case "sent":
		return strconv.AppendInt(nil, w.sent, 10), nil
	case "panic":
		panic("webhook: panic on purpose")
	}
	return nil, errors.New("webhook: unknown message " + strconv.Quote(string(msg)) + " (want post URL BODY, sent or panic)")
}

func init() {
	shardhost.Register(func(string) shardhost.Entity { return &webhook{} })
}

func main() {}
