package client

import "time"

// The API's JSON replies, as this client reads them. A field the API adds later is
// ignored until the client learns it; Do returns any reply whole.

// TypeInfo describes a deployed entity type: its module and its main settings.
type TypeInfo struct {
	Name string `json:"name"`
	// Digest is the hex SHA-256 of the module.
	Digest string `json:"digest"`
	// Size is the module's size in bytes.
	Size int `json:"size"`
	// Shards is the type's number of shards, fixed for the life of the cluster.
	Shards int `json:"shards"`
	// Version counts the deployments of the type, from 1.
	Version uint64 `json:"version"`
	// DeployedAtUnixNano is when the deployment happened (Unix nanoseconds).
	DeployedAtUnixNano int64 `json:"deployed_at_unix_nano"`
	// DeployedBy is the gossip address of the member that took the deployment.
	DeployedBy string `json:"deployed_by"`
	Role       string `json:"role,omitempty"`
	Allocation string `json:"allocation"`
	Checkpoint string `json:"checkpoint"`
	// Removed marks an undeployed type.
	Removed bool `json:"removed,omitempty"`
}

// MemberDeployment says whether one member has a type ready (or stopped, for an
// undeploy).
type MemberDeployment struct {
	Node  string `json:"node"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
}

// Setting is one setting of an entity type, by its deploy flag's name.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// DeployResult is what a deploy did.
type DeployResult struct {
	Type TypeInfo `json:"type"`
	// Members says, for each member, whether the type is ready there.
	Members []MemberDeployment `json:"members"`
	// Settings are the type's settings now.
	Settings []Setting `json:"settings"`
	// Changed maps the settings this deployment changed to their previous values.
	Changed map[string]string `json:"changed,omitempty"`
	// Unchanged says the type already ran this module with these settings: nothing was
	// deployed.
	Unchanged bool `json:"unchanged,omitempty"`
}

// UndeployResult is what an undeploy did.
type UndeployResult struct {
	// Type is the catalog's entry that removed the type.
	Type TypeInfo `json:"type"`
	// Members says, for each member, whether it stopped the type.
	Members []MemberDeployment `json:"members"`
	// StateDeleted says the type's state was deleted.
	StateDeleted bool `json:"state_deleted"`
}

// Member is one member of the cluster.
type Member struct {
	// Address is the member's gossip address, host:port.
	Address string `json:"address"`
	// UID identifies the member's process (16 hex digits).
	UID string `json:"uid"`
	// Transport is where the member receives node-to-node frames, host:port.
	Transport string `json:"transport"`
	// API is the member's HTTP API, host:port ("" if it serves none): an endpoint for
	// New.
	API   string   `json:"api,omitempty"`
	Roles []string `json:"roles"`
	// Status: joining, up, leaving, exiting, down or removed.
	Status string `json:"status"`
	// UpNumber orders members by age (0 while joining).
	UpNumber  int  `json:"up_number"`
	Reachable bool `json:"reachable"`
	Leader    bool `json:"leader"`
}

// ShardsReport is what each member hosts.
type ShardsReport struct {
	Regions []RegionReport `json:"regions"`
	// Errors lists members that did not answer.
	Errors []string `json:"errors,omitempty"`
}

// RegionReport is what one member hosts, and its counters since it started.
type RegionReport struct {
	Node                  string        `json:"node"`
	Shards                []ShardReport `json:"shards"`
	Passivations          uint64        `json:"passivations"`
	BufferedDuringHandoff uint64        `json:"buffered_during_handoff"`
	DeadLetters           uint64        `json:"dead_letters"`
}

// ShardReport is one hosted shard and its number of active entities.
type ShardReport struct {
	Type     string `json:"type"`
	ID       int    `json:"id"`
	Entities int    `json:"entities"`
}

// EntityRow is one entity in a listing. Times are zero when unknown.
type EntityRow struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Shard  int    `json:"shard"`
	Status string `json:"status"`
	// Member hosts it (active or paused), or last hosted it.
	Member        string    `json:"member,omitempty"`
	ModuleVersion uint64    `json:"module_version,omitempty"`
	ActivatedAt   time.Time `json:"activated_at,omitzero"`
	LastMessage   time.Time `json:"last_message,omitzero"`
	// MessagesHandled and MessagesFailed count since its member activated it.
	MessagesHandled uint64 `json:"messages_handled"`
	MessagesFailed  uint64 `json:"messages_failed"`
	// StateBytes is the size of its last saved or loaded state, in bytes.
	StateBytes int64 `json:"state_bytes"`
	// MemoryBytes is its instance's linear memory, in bytes.
	MemoryBytes    int64     `json:"memory_bytes"`
	LastError      string    `json:"last_error,omitempty"`
	LastFailure    time.Time `json:"last_failure,omitzero"`
	Timers         int       `json:"timers"`
	Subscriptions  int       `json:"subscriptions"`
	Queued         int       `json:"queued"`
	Stored         bool      `json:"stored"`
	JournalRecords int       `json:"journal_records"`
}

// EntityPage is one page of a listing.
type EntityPage struct {
	Rows []EntityRow `json:"entities"`
	// Next is the cursor of the next page; "" when this is the last.
	Next string `json:"next,omitempty"`
	// Errors name the members that did not answer: their active entities are missing.
	Errors []string `json:"errors,omitempty"`
}

// EntityDescription is what Describe tells of one entity.
type EntityDescription struct {
	EntityRow
	// Seen is false when no member hosts the entity and the store holds nothing of it.
	Seen bool `json:"seen"`
}
