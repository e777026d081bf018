package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/shardhost/shardhost/client"
)

// exampleRun names the entity of one run of Example, so that a second run (go test
// -count=2) starts from a new counter.
var exampleRun = 0

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// api is a member's API address, HOST:PORT; a cluster's members would all be given.
	c, err := client.New([]string{api})
	if err != nil {
		log.Fatal(err)
	}
	exampleRun++
	id := "example-" + strconv.Itoa(exampleRun)

	reply, err := c.Ask(ctx, "counter", id, []byte("inc 5"), client.WithIdempotencyKey("order-1"))
	fmt.Printf("inc 5: %s %v\n", reply, err)
	// The same key again: the first reply, and the counter counted it once.
	reply, err = c.Ask(ctx, "counter", id, []byte("inc 5"), client.WithIdempotencyKey("order-1"))
	fmt.Printf("inc 5 again, same key: %s %v\n", reply, err)
	count, err := c.Query(ctx, "counter", id, []byte("get"))
	fmt.Printf("query get: %s %v\n", count, err)

	_, err = c.Ask(ctx, "counter", id, []byte("dec"))
	fmt.Println("the entity refused:", errors.Is(err, client.ErrEntity))
	_, err = c.Ask(ctx, "countr", id, []byte("get"))
	var ae *client.APIError
	if errors.As(err, &ae) {
		fmt.Println("unknown type:", errors.Is(err, client.ErrUnknownType), ae.Status, ae.Code)
	}
	// Output:
	// inc 5: 5 <nil>
	// inc 5 again, same key: 5 <nil>
	// query get: 5 <nil>
	// the entity refused: true
	// unknown type: true 404 unknown-entity-type
}
