package host

import (
	"sync"

	"github.com/shardhost/shardhost/cluster"
)

// askEveryMember calls ask for every member at once, each in a goroutine that lives one
// call (the function waits for them all), and returns the answers and errors in the
// members' order: what a request to the whole cluster (versions, entity logs) gathers.
func askEveryMember[T any](members []cluster.Member, ask func(cluster.Member) (T, error)) ([]T, []error) {
	replies := make([]T, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() { // no owner: it lives one call, which waits for it
			defer wg.Done()
			replies[i], errs[i] = ask(m)
		}()
	}
	wg.Wait()
	return replies, errs
}
