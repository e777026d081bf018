package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/pgstore"
	"github.com/shardhost/shardhost/sharding/replstore"
)

func newStateCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Move entity state between state stores (builtin ↔ PostgreSQL); forget a member gone for good",
		Long: `state export writes everything a state store holds (every shard's entity snapshots
and remembered entities) to a file; state import writes such a file into an empty
store. Together they move a stopped cluster's state from one store to another:

  shardhost state export --state-store builtin --data-dir n1 --data-dir n2 --data-dir n3 -o state.export
  shardhost state import --state-store postgres://shardhost@db:5432/shardhost state.export

  shardhost state export --state-store postgres://shardhost@db:5432/shardhost -o state.export
  shardhost state import --state-store builtin --member 10.0.0.1:7946=n1 --member 10.0.0.2:7946=n2 \
      --member 10.0.0.3:7946=n3 state.export

Every member must be stopped. The built-in store keeps each shard on several members:
export reads every member's data directory and keeps the newest version of each
entity. Import into the built-in store places each shard on the members a running
cluster reads it from (the first --replicas of the shard's priority order among the
--member addresses, which must be the --bind addresses the members will start with).
Counts and a digest of the content are written into the file, checked when it is read,
and checked again by reading the target store back after an import.

state forget-member, on a running cluster, makes the built-in store stop waiting for a
member gone for good with its data directory.`,
	}
	cmd.AddCommand(newStateExportCommand(), newStateImportCommand(), g.clientFlags(newStateForgetMemberCommand(g)))
	return cmd
}

func newStateForgetMemberCommand(g *globals) *cobra.Command {
	var accept bool
	cmd := &cobra.Command{
		Use:   "forget-member ADDRESS --accept-loss",
		Short: "Make the built-in state store stop waiting for a member gone for good (its last writes are lost)",
		Long: `The built-in state store keeps a member that went away (downed, left, crashed) in its
ring until the members up have handed its shards over, which they do only while fewer
than a majority of a shard's replicas are gone (one of three). When more are gone (two
of three, say, downed together), those shards refuse reads and writes until the members
return with their data directories; the ring is saved in each member's data directory,
so this holds across restarts of the whole cluster too. A member that will never come
back with its data leaves them unavailable for good: forget-member ADDRESS (its --bind
address, as members shows it) makes every member up drop it from the ring. Once few
enough members are retained, the members up take the shards over, and the writes that
only the forgotten member (and other gone members) held are lost: --accept-loss says
you accept that. The member must be down or gone (shardhost down ADDRESS first); a
member up, joining or leaving is refused. Members that do not answer take the change
from the others later.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !accept {
				return errors.New("forgetting a member loses the writes that only it (and other gone members) held: give --accept-loss")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.do("POST", "/v1/state/members/"+url.PathEscape(args[0])+"/forget", nil)
			if err != nil {
				return err
			}
			var res host.ForgetResult
			if err := json.Unmarshal(resp.body, &res); err != nil {
				return fmt.Errorf("reading the API's reply: %v", err)
			}
			if len(res.RetainedBy) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no member up retained %s: nothing to forget\n", res.Member)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "forgot %s, which %d members retained (%s): its shards are handed over to the members up once few enough members are retained\n",
				res.Member, len(res.RetainedBy), strings.Join(res.RetainedBy, ", "))
			return nil
		},
	}
	cmd.Flags().BoolVar(&accept, "accept-loss", false, "accept the loss of the writes that only this member (and other gone members) held")
	return cmd
}

func newStateExportCommand() *cobra.Command {
	var store, out string
	var dataDirs []string
	cmd := &cobra.Command{
		Use:   "export --state-store builtin|postgres://… [--data-dir DIR]... -o FILE",
		Short: "Write every shard's entity state from a stopped cluster's store to a file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("-o FILE is required (- for standard output)")
			}
			store = stateStoreOr(store)
			kind, err := host.ParseStateStore(store)
			if err != nil {
				return err
			}
			source := "builtin"
			if kind == host.StateStorePostgres {
				source = "postgres"
			} else if len(dataDirs) == 0 {
				return errors.New("--data-dir: give every member's data directory (repeat the flag)")
			}
			var w io.Writer = cmd.OutOrStdout()
			var f *os.File
			if out != "-" {
				if f, err = os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".tmp-*"); err != nil {
					return err
				}
				defer os.Remove(f.Name())
				defer f.Close()
				w = f
			}
			sw, err := newStateFileWriter(w, source)
			if err != nil {
				return err
			}
			if kind == host.StateStorePostgres {
				s, err := openPG(cmd.Context(), store)
				if err != nil {
					return err
				}
				defer s.Close()
				err = s.Export(cmd.Context(), sw.add)
			} else {
				var dirs []string
				for _, d := range dataDirs {
					dirs = append(dirs, stateDirOf(d))
				}
				err = replstore.ExportDirs(dirs, sw.add)
			}
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			digest, err := sw.finish()
			if err != nil {
				return err
			}
			if f != nil {
				if err := f.Sync(); err != nil {
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				if err := os.Rename(f.Name(), out); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported %s\n", digest)
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "state-store", "", "the store to read: builtin, or a PostgreSQL URL (default $SHARDHOST_STATE_STORE, else builtin)")
	cmd.Flags().StringArrayVar(&dataDirs, "data-dir", nil, "a member's data directory (its --data-dir, or that directory's state/), for builtin; repeat for every member")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write (written whole, then renamed into place), or - for standard output")
	return cmd
}

func newStateImportCommand() *cobra.Command {
	var store string
	var members []string
	var replicas int
	cmd := &cobra.Command{
		Use:   "import --state-store builtin|postgres://… [--member ADDR=DATADIR]... FILE",
		Short: "Write a state export into an empty store of a stopped cluster, then check it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store = stateStoreOr(store)
			kind, err := host.ParseStateStore(store)
			if err != nil {
				return err
			}
			file := args[0]
			// The file is checked whole (counts, digest) before anything is written.
			want, err := readStateFileAt(file, func(*sharding.StoredShard) error { return nil })
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			var got *sharding.StateDigest
			if kind == host.StateStorePostgres {
				got, err = importPG(cmd.Context(), store, file)
			} else {
				got, err = importBuiltin(file, members, replicas)
			}
			if err != nil {
				return fmt.Errorf("import: %w", err)
			}
			if !got.Equal(want) {
				return fmt.Errorf("import: the store read back does not match the export: it holds %s; the export has %s", got, want)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "imported %s\nverified: the store read back holds the same (counts and digest match)\n", want)
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "state-store", "", "the store to write: builtin, or a PostgreSQL URL (default $SHARDHOST_STATE_STORE, else builtin)")
	cmd.Flags().StringArrayVar(&members, "member", nil, "for builtin: a member as ADDR=DATADIR, its --bind address and --data-dir; repeat for every member")
	cmd.Flags().IntVar(&replicas, "replicas", replstore.DefaultConfig().Replicas, "for builtin: how many members hold each shard (the store's Replicas)")
	return cmd
}

func readStateFileAt(path string, fn func(*sharding.StoredShard) error) (*sharding.StateDigest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readStateFile(f, fn)
}

// stateDirOf returns a member's state directory: DIR/state, or DIR itself if it holds
// the store's file.
func stateDirOf(dir string) string {
	if _, err := os.Stat(filepath.Join(dir, replstore.FileName)); err == nil {
		return dir
	}
	return filepath.Join(dir, "state")
}

func openPG(ctx context.Context, url string) (*pgstore.Store, error) {
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.MaxConns = url, 2
	// The command reports what it did; of the store's own log, warnings only.
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return pgstore.Open(ctx, cfg)
}

// importPG writes the file into the database in one transaction, committed only once
// the file has been read whole and matched its trailer; it returns the digest of the
// database read back.
func importPG(ctx context.Context, url, file string) (*sharding.StateDigest, error) {
	s, err := openPG(ctx, url)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	im, err := s.Import(ctx)
	if err != nil {
		return nil, err
	}
	defer im.Rollback(context.WithoutCancel(ctx))
	if _, err := readStateFileAt(file, func(sh *sharding.StoredShard) error { return im.ImportShard(ctx, sh) }); err != nil {
		return nil, err
	}
	if err := im.Commit(ctx); err != nil {
		return nil, err
	}
	var got sharding.StateDigest
	if err := s.Export(ctx, got.Add); err != nil {
		return nil, fmt.Errorf("reading the store back: %w", err)
	}
	return &got, nil
}

// importBuiltin writes the file into the members' state directories and returns the
// digest of what they hold, read back.
func importBuiltin(file string, members []string, replicas int) (*sharding.StateDigest, error) {
	if len(members) == 0 {
		return nil, errors.New("--member ADDR=DATADIR: give every member the cluster will start with (repeat the flag)")
	}
	var ms []replstore.MemberDir
	var dirs []string
	for _, m := range members {
		addr, dir, ok := strings.Cut(m, "=")
		if !ok || addr == "" || dir == "" {
			return nil, fmt.Errorf("--member %q: want ADDR=DATADIR (the member's --bind address and --data-dir)", m)
		}
		ms = append(ms, replstore.MemberDir{Addr: addr, Dir: filepath.Join(dir, "state")})
		dirs = append(dirs, filepath.Join(dir, "state"))
	}
	im, err := replstore.NewDirImporter(ms, replicas)
	if err != nil {
		return nil, err
	}
	if _, err := readStateFileAt(file, im.ImportShard); err != nil {
		im.Close()
		return nil, err
	}
	if err := im.Close(); err != nil {
		return nil, err
	}
	var got sharding.StateDigest
	if err := replstore.ExportDirs(dirs, got.Add); err != nil {
		return nil, fmt.Errorf("reading the store back: %w", err)
	}
	return &got, nil
}
