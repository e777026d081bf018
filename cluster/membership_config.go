// The configuration of a Membership (MembershipConfig).

package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"go.opentelemetry.io/otel/metric"
)

// MembershipConfig configures a Membership.
type MembershipConfig struct {
	// BindAddr is the gossip address, host:port. The member's Address is this address
	// (or AdvertiseAddr): use a concrete IP, not 0.0.0.0, unless AdvertiseAddr is set.
	BindAddr string
	// AdvertiseAddr is the gossip address other members use, if not BindAddr.
	AdvertiseAddr string
	// UID identifies this incarnation; 0 picks a random one.
	UID UID
	// Name is the member's stable name (Member.Name), published to the other members:
	// 1-253 characters of letters, digits, '.', '-' and '_' (a DNS name fits), or ""
	// for none. Give each member its own, the same across its restarts: a member that
	// joins with the name of one not down downs it (a new incarnation of it), and the
	// built-in state store ranks replicas by name, so a member restarted at another
	// address with its data keeps the replicas it held. ErrBadMemberName if malformed.
	Name string
	// TransportAddr and APIAddr are published to the other members.
	TransportAddr string
	APIAddr       string
	// Roles are the member's roles.
	Roles []string
	// Seeds are gossip addresses of members to join. None: this member starts a new
	// cluster.
	Seeds []string
	// Lifecycle configures the membership core: minimum members, failure detector,
	// split brain resolver (its Self and Seeds are set from the fields above).
	Lifecycle CoreConfig
	// TickInterval is how often the core is ticked. Default 100 ms.
	TickInterval time.Duration
	// Profile picks memberlist's timing for its own probes and push-pull: "lan"
	// (memberlist.DefaultLANConfig) or "local" (DefaultLocalConfig).
	Profile string
	// GossipKey, if set, encrypts all gossip (AES-GCM through memberlist's keyring);
	// members without the same key cannot join. 16, 24 or 32 bytes.
	GossipKey []byte
	// GossipKeys are more keys of the keyring, which decrypt but do not encrypt (a
	// rotation under way: KeyManager). They need GossipKey.
	GossipKeys [][]byte
	// Transport replaces memberlist's UDP/TCP transport, e.g. an InmemGossipNetwork
	// transport in tests. Nil uses the network at BindAddr.
	Transport memberlist.Transport
	// TLS, if set (and Transport is not), carries all gossip over mutual TLS on
	// BindAddr's TCP port instead of UDP and TCP (gossip_tls.go): only peers with a
	// certificate the configuration accepts (pki.MemberTLSConfig: a member certificate
	// of the cluster CA) can join or gossip.
	TLS *tls.Config
	// States are named state delegates shared through push-pull and broadcasts. Given
	// here, they take part in the first push-pull, at join; RegisterState adds one later.
	States map[string]StateDelegate
	// Logger receives memberlist's log at debug level and membership events at info.
	// Nil: slog.Default().
	Logger *slog.Logger
	// MeterProvider records the membership metrics (members by status, unreachable
	// members, convergence, leader changes, phi of the monitored members). Nil: none.
	MeterProvider metric.MeterProvider
	// Now is the clock of the membership core: its ticks, the arrival of messages and
	// heartbeat responses (the failure detector's intervals), the send times that date
	// View.MajorityContact, the resolver's stable-after and the tombstones' times. Nil:
	// time.Now, whose monotonic reading never steps. Given, the core is passed every
	// advance of this clock and none of its steps back (Membership.Now), so that a
	// clock set back neither stalls the heartbeats and gossip rounds nor lengthens the
	// hosting lease; a step forward reaches the core as a pause of that length would.
	// Memberlist's own probes, the tick interval and the timeouts of sends still follow
	// real time. Tests give a simulated clock (skewed, drifting).
	Now func() time.Time
}

// DefaultMembershipConfig returns a LAN configuration bound to 127.0.0.1:7946.
func DefaultMembershipConfig() MembershipConfig {
	return MembershipConfig{BindAddr: "127.0.0.1:7946", Profile: "lan", Lifecycle: DefaultCoreConfig(), TickInterval: 100 * time.Millisecond}
}

// Validate reports a configuration that cannot work.
func (c MembershipConfig) Validate() error {
	if c.Transport == nil {
		if _, _, err := splitHostPort(c.BindAddr); err != nil {
			return fmt.Errorf("cluster: bind address: %w", err)
		}
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("cluster: advertise address: %w", err)
		}
	}
	if err := CheckMemberName(c.Name); err != nil {
		return err
	}
	if c.Profile != "lan" && c.Profile != "local" {
		return fmt.Errorf("cluster: unknown gossip profile %q (want lan or local)", c.Profile)
	}
	if n := len(c.GossipKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return fmt.Errorf("%w, got %d", ErrBadGossipKey, n)
	}
	if len(c.GossipKeys) > 0 && len(c.GossipKey) == 0 {
		return fmt.Errorf("%w: GossipKeys without a GossipKey", ErrBadGossipKey)
	}
	if c.TickInterval <= 0 {
		return errors.New("cluster: tick interval must be positive")
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// CheckMemberName reports a malformed member name (MembershipConfig.Name): empty is
// none, else 1-253 characters of ASCII letters, digits, '.', '-' and '_'. Errors:
// ErrBadMemberName.
func CheckMemberName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("%w: %d characters, more than 253", ErrBadMemberName, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("%w: %q has %q at %d (letters, digits, '.', '-' and '_' only)", ErrBadMemberName, name, c, i)
		}
	}
	return nil
}
