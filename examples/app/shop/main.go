// Command shop is an example application of the Go client library (package client): a
// small HTTP shop service whose shopping carts are cart entities (examples/wasm/cart)
// in a shardhost cluster. It holds no state of its own: every cart lives in its entity.
//
//	shop --listen 127.0.0.1:8090 --api 127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083
//
// Routes (JSON replies; errors are {"error": TEXT}):
//
//	POST /carts/{id}/items     body: the product's name → 200 {"cart":ID,"items":[...],"total_cents":N}
//	DELETE /carts/{id}/items/{item}                     → 200 the cart, as above
//	GET  /carts/{id}                                    → 200 the cart
//	POST /carts/{id}/checkout                           → 200 {"order":ORDER,"cart":ID,"items":[...],"total_cents":N}
//	GET  /products                                      → 200 {"apple":50,...}: the prices in cents
//
// An unknown product is 400, an empty cart's checkout 409, a cluster that cannot
// answer in time 503. Every message to a cart carries an idempotency key, so the
// client library sends it again, through another member, when a member fails: a
// member killed mid-request costs a retry, not an error. A caller's Idempotency-Key
// header on a checkout makes the checkout itself safe to repeat.
//
// Flags: --api (the members' API addresses, comma-separated), --listen, --token-file
// (a bearer token for the API), --ca-file (the cluster's CA, for HTTPS), --retries and
// --max-backoff (the client's retry policy), --ask-timeout (one try's wait for a cart).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/shardhost/shardhost/client"
)

// prices are the shop's products and their prices, in cents.
var prices = map[string]int{"apple": 50, "pear": 75, "milk": 120, "bread": 250, "tea": 400}

// cartType is the entity type the carts are deployed as.
const cartType = "cart"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8090", "the shop's HTTP address")
	apis := flag.String("api", "127.0.0.1:8081", "the cluster members' API addresses (HOST:PORT or URLs), comma-separated")
	tokenFile := flag.String("token-file", "", "a file holding the API's bearer token")
	caFile := flag.String("ca-file", "", "the cluster's CA certificate (PEM), for an HTTPS API")
	retries := flag.Int("retries", 30, "tries of one message to a cart, in all")
	maxBackoff := flag.Duration("max-backoff", 2*time.Second, "the longest wait between two tries")
	askTimeout := flag.Duration("ask-timeout", 10*time.Second, "how long one try waits for a cart's reply")
	flag.Parse()

	opts := []client.Option{client.WithRetry(*retries, 50*time.Millisecond, *maxBackoff), client.WithUserAgent("shardhost-example-shop")}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return err
		}
		opts = append(opts, client.WithToken(strings.TrimSpace(string(b))))
	}
	if *caFile != "" {
		opts = append(opts, client.WithCAFile(*caFile))
	}
	c, err := client.New(strings.Split(*apis, ","), opts...)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv := &http.Server{Handler: (&shop{c: c, askTimeout: *askTimeout, log: log}).routes(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	log.Info("shop serving", "addr", l.Addr().String(), "api", c.Endpoints())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	<-done
	return err
}

// shop serves the HTTP routes over the cart entities.
type shop struct {
	c          *client.Client
	askTimeout time.Duration
	log        *slog.Logger
}

func (s *shop) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /products", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, prices) })
	mux.HandleFunc("POST /carts/{id}/items", s.add)
	mux.HandleFunc("DELETE /carts/{id}/items/{item}", s.remove)
	mux.HandleFunc("GET /carts/{id}", s.view)
	mux.HandleFunc("POST /carts/{id}/checkout", s.checkout)
	return mux
}

// cart is a cart's reply.
type cart struct {
	Order      string   `json:"order,omitempty"`
	ID         string   `json:"cart"`
	Items      []string `json:"items"`
	TotalCents int      `json:"total_cents"`
}

// ask sends msg to the cart id with the idempotency key key (a new random one when
// empty), so that the client may send it again through another member.
func (s *shop) ask(ctx context.Context, id, msg, key string) ([]byte, error) {
	if key == "" {
		key = newKey()
	}
	return s.c.Ask(ctx, cartType, id, []byte(msg), client.WithIdempotencyKey(key), client.WithAskTimeout(s.askTimeout))
}

// items returns the cart's items and their total.
func (s *shop) items(ctx context.Context, id string) (cart, error) {
	b, err := s.ask(ctx, id, "list", "")
	if err != nil {
		return cart{}, err
	}
	out := cart{ID: id}
	if err := json.Unmarshal(b, &out.Items); err != nil {
		return cart{}, fmt.Errorf("cart %s answered %q, not a list of items: %w", id, b, err)
	}
	for _, it := range out.Items {
		out.TotalCents += prices[it]
	}
	return out, nil
}

func (s *shop) add(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	body, err := io.ReadAll(io.LimitReader(r.Body, 65))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	item := strings.TrimSpace(string(body))
	if _, ok := prices[item]; !ok {
		writeError(w, http.StatusBadRequest, fmt.Errorf("no product %q (see GET /products)", item))
		return
	}
	if _, err := s.ask(r.Context(), id, "add "+item, r.Header.Get("Idempotency-Key")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.view(w, r)
}

func (s *shop) remove(w http.ResponseWriter, r *http.Request) {
	if _, err := s.ask(r.Context(), r.PathValue("id"), "remove "+r.PathValue("item"), r.Header.Get("Idempotency-Key")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.view(w, r)
}

func (s *shop) view(w http.ResponseWriter, r *http.Request) {
	c, err := s.items(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// checkout takes the cart's items as an order and empties the cart: each item is
// removed with a key made of the order's and the item's names, so that a checkout sent
// again with the same Idempotency-Key removes nothing twice.
func (s *shop) checkout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	order := r.Header.Get("Idempotency-Key")
	if order == "" {
		order = newKey()
	}
	c, err := s.items(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(c.Items) == 0 {
		writeError(w, http.StatusConflict, fmt.Errorf("cart %s is empty", id))
		return
	}
	for _, it := range c.Items {
		if _, err := s.ask(r.Context(), id, "remove "+it, "checkout "+order+" "+it); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	c.Order = order
	slices.Sort(c.Items)
	s.log.Info("checkout", "cart", id, "order", order, "items", len(c.Items), "total_cents", c.TotalCents)
	writeJSON(w, http.StatusOK, c)
}

// fail answers with the cluster's failure: a cart's refusal is the caller's (400),
// a cluster that cannot answer now 503, anything else 502.
func (s *shop) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	switch {
	case errors.Is(err, client.ErrEntity), errors.Is(err, client.ErrBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	}
	s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	writeError(w, status, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// newKey returns a random idempotency key: 16 bytes in hex.
func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
