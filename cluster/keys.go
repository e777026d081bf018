package cluster

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/hashicorp/memberlist"
)

// Gossip key rotation, cluster-wide, after serf's KeyManager: an operator installs a new
// key on every member, makes it the primary one (the one that encrypts) everywhere, then
// removes the old one everywhere. A member decrypts with any key of its keyring, so the
// cluster keeps talking through each step. The KeyManager of one member fans each step
// out to every member over the messenger and gathers their answers.

// Errors of gossip key management.
var (
	// ErrNoKeyring: gossip is not encrypted on this member (start it with a gossip key).
	ErrNoKeyring = errors.New("cluster: gossip encryption is off on this member (start members with a gossip key)")
	// errNoSuchKey: no key of the keyring has the given ID (a member's answer says so).
	errNoSuchKey = errors.New("cluster: no such gossip key")
)

// topicKeys carries a key operation to a member.
const topicKeys = "cluster/keys"

// KeyID is the fingerprint of a gossip key: the first 8 bytes of its SHA-256, in hex.
// Lists and logs show key IDs, never keys.
func KeyID(key []byte) string {
	d := sha256.Sum256(key)
	return hex.EncodeToString(d[:8])
}

// Keyring returns this member's gossip keyring (safe for concurrent use), or nil when
// gossip is not encrypted.
func (m *Membership) Keyring() *memberlist.Keyring { return m.keyring }

// keyOp is a gossip key operation.
type keyOp string

const (
	keyList    keyOp = "list"
	keyInstall keyOp = "install"
	keyUse     keyOp = "use"
	keyRemove  keyOp = "remove"
)

// KeyResponse is the outcome of a key operation across the cluster.
type KeyResponse struct {
	// Members is the number of members asked; Responses of those that answered, with
	// success or not.
	Members   int `json:"members"`
	Responses int `json:"responses"`
	// Failures maps a member's address to why the operation failed there (or did not
	// answer).
	Failures map[string]string `json:"failures,omitempty"`
	// Keys maps each key ID to the number of members holding the key, and PrimaryKeys
	// each key ID to the number of members encrypting with it, after the operation.
	Keys        map[string]int `json:"keys"`
	PrimaryKeys map[string]int `json:"primary_keys"`
}

// keyRequest is a key operation sent to one member. Install carries the new key sealed
// with the sender's primary key (AES-GCM), so that it never crosses the network in
// clear even between members without TLS; use and remove carry key IDs only.
type keyRequest struct {
	Op     keyOp  `cbor:"1,keyasint"`
	KeyID  string `cbor:"2,keyasint,omitempty"`
	Sealed []byte `cbor:"3,keyasint,omitempty"`
	Nonce  []byte `cbor:"4,keyasint,omitempty"`
	// SealedBy is the ID of the key that sealed Sealed.
	SealedBy string `cbor:"5,keyasint,omitempty"`
}

// keyReply is one member's answer: its key IDs (primary first) or an error.
type keyReply struct {
	Keys  []string `cbor:"1,keyasint,omitempty"`
	Error string   `cbor:"2,keyasint,omitempty"`
}

// KeyManagerConfig configures a KeyManager.
type KeyManagerConfig struct {
	Membership *Membership
	Messenger  *Messenger
	// Persist, if set, is called after every change of this member's keyring with its
	// keys, primary first, so that a restarted member starts with them. An error fails
	// the operation on this member.
	Persist func(keys [][]byte) error
	// Timeout bounds the wait for the members' answers. Default 5 s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// KeyManager runs gossip key operations across the cluster. Safe for concurrent use;
// operations are serialised on each member.
type KeyManager struct {
	cfg KeyManagerConfig
	log *slog.Logger
	mu  sync.Mutex // serialises changes of the local keyring
}

// NewKeyManager returns the key manager of a member and registers its topic on the
// messenger (once per messenger).
func NewKeyManager(cfg KeyManagerConfig) (*KeyManager, error) {
	if cfg.Membership == nil || cfg.Messenger == nil {
		return nil, errors.New("cluster: a key manager needs the membership and the messenger")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	k := &KeyManager{cfg: cfg, log: cfg.Logger.With("component", "cluster.keys")}
	cfg.Messenger.Handle(topicKeys, k.handle)
	return k, nil
}

// List returns which keys the members hold.
func (k *KeyManager) List(ctx context.Context) (KeyResponse, error) {
	return k.fanOut(ctx, keyRequest{Op: keyList})
}

// Install adds key to every member's keyring (16, 24 or 32 bytes). It does not change
// the key members encrypt with.
func (k *KeyManager) Install(ctx context.Context, key []byte) (KeyResponse, error) {
	if err := memberlist.ValidateKey(key); err != nil {
		return KeyResponse{}, fmt.Errorf("%w: %v", ErrBadGossipKey, err)
	}
	kr := k.cfg.Membership.Keyring()
	if kr == nil {
		return KeyResponse{}, ErrNoKeyring
	}
	primary := kr.GetPrimaryKey()
	sealed, nonce, err := seal(primary, key)
	if err != nil {
		return KeyResponse{}, err
	}
	return k.fanOut(ctx, keyRequest{Op: keyInstall, KeyID: KeyID(key), Sealed: sealed, Nonce: nonce, SealedBy: KeyID(primary)})
}

// Use makes the key with this ID the one every member encrypts with; each member must
// hold it (Install first).
func (k *KeyManager) Use(ctx context.Context, keyID string) (KeyResponse, error) {
	return k.fanOut(ctx, keyRequest{Op: keyUse, KeyID: keyID})
}

// Remove removes the key with this ID from every member; a member refuses to remove
// the key it encrypts with (Use another first).
func (k *KeyManager) Remove(ctx context.Context, keyID string) (KeyResponse, error) {
	return k.fanOut(ctx, keyRequest{Op: keyRemove, KeyID: keyID})
}

// fanOut applies req on this member and sends it to every other member that is not down
// or removed, and gathers the answers. It fails only if this member cannot take part;
// failures elsewhere are in the response.
func (k *KeyManager) fanOut(ctx context.Context, req keyRequest) (KeyResponse, error) {
	if k.cfg.Membership.Keyring() == nil {
		return KeyResponse{}, ErrNoKeyring
	}
	body, err := cbor.Marshal(req)
	if err != nil {
		return KeyResponse{}, err
	}
	self := k.cfg.Membership.Self()
	resp := KeyResponse{Failures: map[string]string{}, Keys: map[string]int{}, PrimaryKeys: map[string]int{}}
	var mu sync.Mutex
	record := func(member string, rep keyReply, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			resp.Failures[member] = err.Error()
			return
		}
		resp.Responses++
		if rep.Error != "" {
			resp.Failures[member] = rep.Error
		}
		for i, id := range rep.Keys {
			resp.Keys[id]++
			if i == 0 {
				resp.PrimaryKeys[id]++
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	// One request per member at once, each on a goroutine of its own that fanOut waits
	// for before it returns (each bounded by ctx): they live no longer than the call, so
	// they need no owner beyond it.
	var wg sync.WaitGroup
	for _, mem := range k.cfg.Membership.Members() {
		if mem.Status == StatusDown || mem.Status == StatusRemoved {
			continue
		}
		resp.Members++
		if mem.Node() == self.Node() {
			rep := k.apply(req)
			record(mem.Address, rep, nil)
			continue
		}
		wg.Add(1)
		go func(mem Member) {
			defer wg.Done()
			b, err := k.cfg.Messenger.Request(ctx, mem.TransportAddr, topicKeys, body)
			var rep keyReply
			if err == nil {
				if err = gossipDecMode.Unmarshal(b, &rep); err != nil {
					err = fmt.Errorf("%w: key reply: %v", errMalformedGossip, err)
				}
			}
			record(mem.Address, rep, err)
		}(mem)
	}
	wg.Wait()
	if len(resp.Failures) == 0 {
		resp.Failures = nil
	}
	return resp, nil
}

// handle applies a key operation sent by another member.
func (k *KeyManager) handle(r *Request) {
	var req keyRequest
	if err := gossipDecMode.Unmarshal(r.Body, &req); err != nil {
		r.Reply(nil, fmt.Errorf("%w: key request: %v", errMalformedGossip, err))
		return
	}
	// Off the transport's reader (Persist may write to disk), on a goroutine of the
	// membership whose keyring it changes: its Shutdown waits for it.
	if !k.cfg.Membership.owner.Go(func() {
		b, err := cbor.Marshal(k.apply(req))
		r.Reply(b, err)
	}) {
		r.Reply(nil, ErrMembershipClosed)
	}
}

// apply runs req on this member's keyring and returns its keys after it.
func (k *KeyManager) apply(req keyRequest) keyReply {
	kr := k.cfg.Membership.Keyring()
	if kr == nil {
		return keyReply{Error: ErrNoKeyring.Error()}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.applyLocked(kr, req)
	if err != nil {
		k.log.Warn("gossip key operation failed", "op", req.Op, "key", req.KeyID, "err", err)
	} else if req.Op != keyList {
		k.log.Info("gossip keyring changed", "op", req.Op, "key", req.KeyID, "primary", KeyID(kr.GetPrimaryKey()))
	}
	rep := keyReply{}
	if err != nil {
		rep.Error = err.Error()
	}
	keys := orderedKeys(kr)
	for _, key := range keys {
		rep.Keys = append(rep.Keys, KeyID(key))
	}
	return rep
}

func (k *KeyManager) applyLocked(kr *memberlist.Keyring, req keyRequest) error {
	switch req.Op {
	case keyList:
		return nil
	case keyInstall:
		var key []byte
		for _, c := range kr.GetKeys() {
			if KeyID(c) == req.SealedBy {
				if b, err := open(c, req.Nonce, req.Sealed); err == nil {
					key = b
				}
			}
		}
		if key == nil {
			return fmt.Errorf("cluster: cannot read the new key: this member does not hold key %s, which sealed it", req.SealedBy)
		}
		if KeyID(key) != req.KeyID {
			return fmt.Errorf("cluster: the new key does not match its ID %s", req.KeyID)
		}
		if err := kr.AddKey(key); err != nil {
			return err
		}
	case keyUse, keyRemove:
		key, ok := findKey(kr, req.KeyID)
		if !ok {
			return fmt.Errorf("%w: %s on this member", errNoSuchKey, req.KeyID)
		}
		var err error
		if req.Op == keyUse {
			err = kr.UseKey(key)
		} else {
			err = kr.RemoveKey(key)
		}
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("cluster: unknown key operation %q", req.Op)
	}
	if k.cfg.Persist != nil {
		if err := k.cfg.Persist(orderedKeys(kr)); err != nil {
			return fmt.Errorf("cluster: keyring changed but not saved: %w", err)
		}
	}
	return nil
}

// orderedKeys returns the keyring's keys, primary first, the others by ID.
func orderedKeys(kr *memberlist.Keyring) [][]byte {
	primary := kr.GetPrimaryKey()
	var rest [][]byte
	for _, key := range kr.GetKeys() {
		if string(key) != string(primary) {
			rest = append(rest, key)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return KeyID(rest[i]) < KeyID(rest[j]) })
	return append([][]byte{primary}, rest...)
}

// findKey returns the key of the keyring whose ID is id.
func findKey(kr *memberlist.Keyring, id string) ([]byte, bool) {
	for _, key := range kr.GetKeys() {
		if KeyID(key) == id {
			return key, true
		}
	}
	return nil, false
}

func seal(key, plain []byte) (sealed, nonce []byte, err error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	nonce = make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, err
	}
	return gcm.Seal(nil, nonce, plain, []byte(topicKeys)), nonce, nil
}

func open(key, nonce, sealed []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if len(nonce) != gcm.NonceSize() {
		return nil, errors.New("cluster: bad nonce")
	}
	return gcm.Open(nil, nonce, sealed, []byte(topicKeys))
}
