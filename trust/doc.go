// Package trust holds the cluster's credentials: a certificate authority
// and the certificates it issues, TLS configurations for mutual TLS
// between the daemons, the key that signs coordinator decisions, bearer
// tokens, NATS nkeys, and the directory layout `tmmu secrets init DIR`
// writes. The coordinator, worker and CLI read their credentials through
// it; it uses only the standard library's crypto and nats-io/nkeys.
//
// # Identities
//
// Every certificate names exactly one identity, a role and an id: the
// URI SAN "tmmu://<role>/<id>", with the subject's common name <id>.
// CertIdentity reads it back from a verified peer certificate; an id is 1
// to 64 of [A-Za-z0-9_.-].
//
//	ca, _ := trust.NewCA("tmmu cluster CA", 10*365*24*time.Hour)
//	leaf, _ := ca.Issue(trust.RoleWorker, "w3", nil, 365*24*time.Hour)
//	// leaf.CertPEM: CN "w3", URI SAN "tmmu://worker/w3", client auth only
//	role, id, ok := trust.CertIdentity(cert) // "worker", "w3", true
//
// What each role's certificate may do:
//
//	role         TLS server  TLS client  hosts (SANs)         held by
//	coordinator  yes         yes         its id, localhost,   a coordinator: its API and
//	                                     127.0.0.1, Hosts     peer links; client of NATS, etcd
//	nats         yes         yes         nats, localhost,     the NATS server
//	                                     127.0.0.1, Hosts
//	etcd         yes         yes         etcd, localhost,     the etcd server
//	                                     127.0.0.1, Hosts
//	worker       no          yes         none (refused)       a worker: client of the
//	                                                          coordinator API and NATS
//	operator     no          yes         none (refused)       the tmmu CLI: client of the
//	                                                          coordinator API
//
// Client-only certificates carry neither the server-auth extended key
// usage nor any DNS or IP SAN, so a stolen worker key cannot pose as a
// coordinator: hostname verification fails before anything else.
//
// # Mutual TLS
//
// TLSFiles names a CA, certificate and key; its zero value means TLS is
// off. A server says which roles may connect, a client which role it
// expects to reach:
//
//	files := trust.Layout{Dir: "/etc/tmmu"}.TLS(trust.RoleCoordinator, "c0")
//	if err := files.Validate(); err != nil { ... } // every problem at once
//	// The API: coordinators and operators, each with a certificate.
//	srv, _ := files.Server(true, trust.RoleCoordinator, trust.RoleOperator)
//	// Dialling etcd: only a certificate of role etcd will do.
//	cli, _ := files.Client(trust.RoleEtcd)
//
// Configurations require TLS 1.3. A refused peer gets an error naming the
// role and id it presented ("trust: client worker/w3 refused; want role
// coordinator or operator"). Hostname verification stays on for clients.
//
// # Certificate reloading
//
// Server and Client configurations read the certificate and key through
// GetCertificate and GetClientCertificate, which stat both files at every
// handshake and re-read them when either's modification time or size has
// changed. Rotating a leaf is: write the new key and certificate over the
// old ones (renaming into place is best); new connections use them, open
// ones are untouched. While the two files do not form a pair (one written,
// not yet the other) the last good pair is served. The CA pool is read
// once, when the configuration is built.
//
// # Decision signing
//
// Coordinators sign the decisions they publish with an ed25519 key;
// workers verify them. Signatures are over Context ("tmmu decision
// v1\x00") followed by the message, so a decision signature is valid for
// nothing else signed with the same key.
//
//	s, _ := trust.LoadSigner(layout.SigningKey())
//	sig := s.Sign(msg)
//	v, _ := trust.LoadVerifier(layout.VerifyKey())
//	v.Verify(msg, sig) // true
//
// The public key file may hold several keys, and Verify accepts a
// signature by any of them. To rotate: add the new public key to
// signing.pub (PublicPEM(old, new)) and roll it out, switch the
// coordinators' signing.key, then drop the old public key.
//
// # Layout
//
// Generate writes, or completes, the files of a cluster in one directory
// (0700), keeping what exists: run it again with more workers and only
// their files appear. Key, seed and token files are 0600 (0644 with
// Plan.FilesReadable, for containers that run as another uid), the rest
// 0644.
//
//	DIR/ca.crt                    the cluster CA certificate
//	DIR/ca.key                    its key: keep it offline once the cluster is set up
//	DIR/signing.pub               public decision keys (one or more): every worker
//	DIR/read-token                bearer token for read-only API access
//	DIR/coordinator/<id>.crt,.key coordinator certificate and key
//	DIR/coordinator/<id>.nk       coordinator NATS nkey seed
//	DIR/coordinator/signing.key   decision signing key: coordinators only
//	DIR/worker/<id>.crt,.key      worker certificate and key
//	DIR/worker/<id>.nk            worker NATS nkey seed
//	DIR/operator/<id>.crt,.key    operator (CLI) certificate and key
//	DIR/operator/api-token        bearer token of the coordinator API
//	DIR/nats/nats.crt,.key        NATS server certificate and key
//	DIR/nats/auth.conf            NATS authorization, rewritten by every Generate
//	DIR/etcd/etcd.crt,.key        etcd server certificate and key
//
// Layout's methods name each file; Generate takes a Plan and a function
// that renders the NATS authorization from the users found:
//
//	users, err := trust.Generate(dir, trust.Plan{
//		Coordinators: []string{"c0", "c1", "c2"},
//		Workers:      []string{"w0", "w1", "w2", "w3"},
//		Hosts:        []string{"tmmu.example.internal"},
//	}, renderNATSAuth)
//	// users: coordinator c0..c2 then worker w0..w3, each with its public nkey
//
// Errors all start with "trust: ". Bad input gives an error, never a
// panic.
package trust
