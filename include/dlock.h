/*
 * dlock: Redisson's distributed lock family for C.
 *
 * Locks live in Redis, in exactly the layout Redisson uses, so C programs and
 * Java services using Redisson exclude each other on the same lock name.
 *
 * Threads: a dlock_client_t may be shared by any number of threads; so may a
 * dlock_t. A lock is owned by (client, owner), where the owner is by default
 * the calling thread (see dlock_self()), exactly like Redisson's
 * "<client-uuid>:<thread-id>". The *_as variants take an explicit owner so one
 * thread can lock and another unlock.
 *
 * fork(): a client does not cross fork(). In the child, every call on a
 * client inherited from the parent, or on a handle of it, fails with
 * DLOCK_EFORKED and touches nothing the parent uses: the connections and
 * locks stay the parent's, which goes on undisturbed. In the child,
 * dlock_free on such a handle and dlock_client_close on such a client only
 * free the child's copy of the memory and close the child's copies of the
 * descriptors; they take no lock and wait for nothing, so they return at
 * once whatever the parent's threads were doing. (What a parent thread was
 * in the middle of changing at the instant of the fork is left alone
 * rather than freed; it goes when the child exits, and its descriptors,
 * all close-on-exec, when it execs.) A child that needs locks opens its
 * own client.
 *
 * Errors: every function returns 0 (or the non-negative value documented for
 * it) on success and a negative DLOCK_E* code on failure. The detail of the
 * last failure on the calling thread (the syscall and errno, or the text of
 * Redis's error reply) is returned by dlock_last_error().
 *
 * Memory: everything dlock allocates is freed by the matching *_free or
 * *_close function; strings returned as "const char *" are owned by dlock.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_EXPORT __attribute__((visibility("default")))
#else
#define DLOCK_EXPORT
#endif

/*
 * The version of this header. CMakeLists.txt reads the three numbers from
 * here, so the header, the library and dlock.pc never disagree. The
 * library a program runs with may be newer than the header it was built
 * with: dlock_version() tells which it is.
 */
#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 2
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION_STRING "0.2.0"
/* One number that compares in order: 0x000200 for 0.2.0. */
#define DLOCK_VERSION_NUMBER                                                   \
  ((DLOCK_VERSION_MAJOR << 16) | (DLOCK_VERSION_MINOR << 8) |                  \
   DLOCK_VERSION_PATCH)
/* For "#if DLOCK_VERSION_AT_LEAST(0, 2, 0)" around newer calls. */
#define DLOCK_VERSION_AT_LEAST(major, minor, patch)                            \
  (DLOCK_VERSION_NUMBER >= (((major) << 16) | ((minor) << 8) | (patch)))

/* The version of the library running, as DLOCK_VERSION_NUMBER encodes it. */
DLOCK_EXPORT unsigned dlock_version(void);

/* The same as a string, "0.2.0"; static, never NULL. */
DLOCK_EXPORT const char *dlock_version_string(void);

/*
 * Error codes. One table generates the enum, dlock_strerror() and
 * dlock_err_name(), so the three never disagree.
 */
#define DLOCK_ERRNO_MAP(X)                                                     \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EIO, -3, "connection to Redis failed or timed out")                        \
  X(ETIMEDOUT, -4, "lock not acquired within the wait time")                   \
  X(ENOTHELD, -5, "lock not held by this owner")                               \
  X(ELOST, -6, "lock was lost while held (expired or deleted)")                \
  X(ESERVER, -7, "Redis answered with an error")                               \
  X(EAUTH, -8, "authentication or permission denied by Redis")                 \
  X(ECANCELED, -9, "operation canceled: the client is shutting down")          \
  X(EPROTO, -10, "unexpected reply: the server does not speak Redis")          \
  X(ENOQUORUM, -11, "no majority of Redis nodes could be reached")             \
  X(ENOTLOCK, -12, "the key holds something other than a lock of this kind")   \
  X(EFORKED, -13,                                                              \
    "client inherited across fork(): open a new one in this process")          \
  X(ENOSYNC, -14,                                                              \
    "too few replicas acknowledged the lock in time (replica_sync)")

typedef enum dlock_err {
#define DLOCK__ERR_ENUM(name, code, text) DLOCK_##name = (code),
  DLOCK_ERRNO_MAP(DLOCK__ERR_ENUM)
#undef DLOCK__ERR_ENUM
} dlock_err_t;

/* A short English description of 'err'; never NULL (unknown codes included). */
DLOCK_EXPORT const char *dlock_strerror(int err);

/* The symbolic name of 'err' ("DLOCK_ETIMEDOUT"); "DLOCK_E?" when unknown. */
DLOCK_EXPORT const char *dlock_err_name(int err);

/*
 * The detail of the last failure on the calling thread, for example
 * "connect(127.0.0.1:6379): Connection refused" or Redis's "READONLY ..."
 * text. Valid until the next dlock call on this thread; "" when none.
 */
DLOCK_EXPORT const char *dlock_last_error(void);

/*
 * Allocator hooks. Every allocation dlock itself makes goes through these
 * (hiredis, underneath, uses its own). Set them before opening any client;
 * memory allocated with one set must be freed with the same. 'a' NULL
 * restores the C library's. Returns the previous set.
 */
typedef struct dlock_allocators {
  void *(*malloc_fn)(size_t size);
  void *(*calloc_fn)(size_t nmemb, size_t size);
  void *(*realloc_fn)(void *ptr, size_t size);
  void (*free_fn)(void *ptr);
} dlock_allocators_t;

DLOCK_EXPORT dlock_allocators_t
dlock_set_allocators(const dlock_allocators_t *a);

/* -------------------------------------------------------------------------
 * Clients
 * ------------------------------------------------------------------------- */

typedef struct dlock_client dlock_client_t;
typedef struct dlock dlock_t;

/* lease_ms meaning "hold until unlocked, renewed by the watchdog". */
#define DLOCK_WATCHDOG (-1)
/* wait_ms meaning "wait as long as it takes". */
#define DLOCK_WAIT_FOREVER (-1)
/*
 * The longest duration accepted anywhere, in milliseconds: 10^12 ms, about
 * 31.7 years. Every lease_ms and wait_ms, and every *_ms option, above it
 * fails with DLOCK_EINVAL before anything is sent. For "until unlocked"
 * pass DLOCK_WATCHDOG, for "as long as it takes" DLOCK_WAIT_FOREVER.
 *
 * Why a limit, and why this one: dlock turns milliseconds into microseconds
 * of CLOCK_MONOTONIC (x 1000) and adds them to the current time; Redis adds
 * a PEXPIRE to the Unix time in milliseconds (about 1.7 x 10^12 today) and
 * refuses a sum past INT64_MAX, after the script has written the lock; the
 * Lua scripts compute with doubles, exact only up to 2^53 (about 9 x
 * 10^15). At 10^12 ms every such sum stays thousands of times below where
 * it would overflow or round, while no lease or wait needs to be longer.
 */
#define DLOCK_DURATION_MAX_MS INT64_C(1000000000000)
/* The largest unlock_retries accepted (see dlock_options_t). */
#define DLOCK_UNLOCK_RETRIES_MAX 100
/* The longest lock name accepted, in bytes. */
#define DLOCK_NAME_MAX 65536

/*
 * Called from the client's watchdog thread as soon as a renewal finds that a
 * lock is no longer held by its owner (it expired or was deleted), or when
 * a lease ran out without a renewal confirmed by Redis (Redis unreachable,
 * or a link so slow that no renewal gets through): then at the end of that
 * lease as the client counts it, which starts before Redis's. 'name' is the
 * lock name ('name_len' bytes, NUL-terminated too), 'owner' the owner that lost
 * it. The callback may call dlock functions but should return quickly: it
 * delays the renewal of other locks.
 */
typedef void (*dlock_lost_cb)(void *data, const char *name, size_t name_len,
                              uint64_t owner);

/*
 * Called with a warning about the deployment, in one line of English
 * ('text', NUL-terminated, valid during the call): so far, from
 * dlock_client_open on the calling thread, when the server's
 * maxmemory-policy may evict keys, which can evict a held lock (see
 * docs/deployment.md). dlock never writes to stderr itself: without this
 * callback a warning is dropped.
 */
typedef void (*dlock_warning_cb)(void *data, const char *text);

/*
 * What an on_event callback is told (see dlock_options_t.on_event).
 */
typedef enum dlock_event_kind {
  /* A lock was acquired: 'wait_us' is how long the call took, 'token' the
   * fencing token, 'count' the owner's holds on it (more than 1: a
   * reentrant acquisition). */
  DLOCK_EVENT_ACQUIRED = 1,
  /* An owner's last hold of a lock was released: 'hold_us' is how long it
   * was held ('token' its token). */
  DLOCK_EVENT_RELEASED,
  /* An acquisition had to wait for another holder: 'wait_us' is how long
   * it waited. Comes just before the ACQUIRED, TIMED_OUT or FAILED event
   * of the same call. */
  DLOCK_EVENT_WAITED,
  /* An acquisition ended without the lock: the lock stayed taken for the
   * whole wait ('wait_us'; 0 for a try without a wait). */
  DLOCK_EVENT_TIMED_OUT,
  /* An acquisition failed with error 'err' (not a time-out). */
  DLOCK_EVENT_FAILED,
  /* A hold was found lost (its key expired or was deleted): by the
   * watchdog, or by the owner's unlock or re-acquisition. */
  DLOCK_EVENT_LOST,
  /* A watchdog renewal round ended: 'count' holds renewed, 'err' 0 when
   * Redis answered it. */
  DLOCK_EVENT_RENEWAL_ROUND,
  /* A command connection to Redis was made again after it had failed
   * (the pub/sub connection's are DLOCK_EVENT_PUBSUB_RECONNECT). */
  DLOCK_EVENT_RECONNECT,
  /* The client followed a failover to a new master (Sentinel). */
  DLOCK_EVENT_FAILOVER,
  /* A write was acknowledged by fewer replicas than replica sync asks:
   * 'count' is how many did. */
  DLOCK_EVENT_SYNC_SHORTFALL,
  /* A pub/sub connection (the one waiters are woken through) was made
   * again after it had failed, or moved to a new master. */
  DLOCK_EVENT_PUBSUB_RECONNECT
} dlock_event_kind_t;

/* The name of 'kind' ("acquired", "released", ...); "?" when unknown. */
DLOCK_EXPORT const char *dlock_event_kind_name(int kind);

typedef struct dlock_event {
  int kind;         /* a dlock_event_kind_t */
  const char *name; /* the lock's name, NULL for events of no lock */
  size_t name_len;
  uint64_t owner;  /* the owner, 0 for events of no owner */
  uint64_t token;  /* the fencing token, when the event has one */
  int64_t wait_us; /* see the kinds */
  int64_t hold_us;
  uint64_t count;
  int err; /* a DLOCK_E* code, 0 when none */
  /* What the acquisition or release was of: a dlock_stats_kind_t
   * (DLOCK_STATS_LOCK, 0, for single locks and for events of no lock).
   * A semaphore's 'count' is its permits; an expirable permit's 'owner'
   * and 'token' are the permit's; a latch's ACQUIRED is an await that
   * found it at zero; a MultiLock's or RedLock's 'name' is its first
   * part's. */
  int what;
} dlock_event_t;

/*
 * Called with each event of the client, once, in the order it happened on
 * the thread that raised it (the caller's for acquisitions and releases,
 * the watchdog thread for lost locks and renewal rounds, the thread that
 * reconnected, the pub/sub thread for its reconnects, the Sentinel
 * watcher for a failover; an async client's loop thread for all of its
 * own). Acquisitions and releases of semaphores, expirable permits,
 * latches, MultiLocks and RedLocks raise the same kinds as a lock's, with
 * 'what' saying which; a MultiLock's or RedLock's parts raise none of
 * their own. 'e' and the name it
 * points at are valid during the call only. dlock holds none of its own
 * locks while calling it and allocates nothing for it; the callback may
 * call dlock functions but should return quickly, since it delays the
 * thread that raised the event.
 */
typedef void (*dlock_event_cb)(void *data, const dlock_event_t *e);

/* Every *_ms option is 1..DLOCK_DURATION_MAX_MS (watchdog_timeout_ms at
 * least 3); dlock_client_open fails with DLOCK_EINVAL, naming the option,
 * for any other value. */
typedef struct dlock_options {
  /* "redis://[user:pass@]host[:port][/db]", "rediss://..." (TLS),
   * "unix:///path[?db=N]", or Sentinels that name the master:
   * "redis-sentinel://[user:pass@]host[:port][,host[:port]...]/master
   * [?db=N&sentinel_user=U&sentinel_password=P]" (or rediss-sentinel://
   * for TLS to the Sentinels and the data nodes; see "Replicated Redis"
   * below), or a Redis Cluster's seed nodes:
   * "redis-cluster://[user:pass@]host[:port][,host[:port]...]
   * [?sharded_pubsub=auto|off]" (or rediss-cluster:// for TLS), each lock
   * then on the master of its slot and its unlock messages on sharded
   * pub/sub (SPUBLISH, SSUBSCRIBE on that master) where the cluster
   * answers PUBSUB SHARDNUMSUB and runs SPUBLISH when the client opens, as
   * Redisson's are, else (or with sharded_pubsub=off, as Redisson's
   * shardedSubscriptionMode OFF) on classic pub/sub;
   * default "redis://127.0.0.1:6379". Not copied by
   * dlock_options_init. */
  const char *url;
  int64_t connect_timeout_ms;  /* default 2000 */
  int64_t command_timeout_ms;  /* default 3000 */
  int64_t watchdog_timeout_ms; /* default 30000; renewal every third */
  /* Client id used in owner fields; NULL (default) draws a random UUID.
   * Copied at open. Two live clients must never share an id. */
  const char *client_id;
  /* How many times an unlock whose reply was lost is sent again on a fresh
   * connection (it is idempotent, see the unlock latch); default 2, at
   * most DLOCK_UNLOCK_RETRIES_MAX. */
  int unlock_retries;
  /* How long a queued fair-lock waiter may stay silent before it is
   * dropped from the queue, and the step between the queue's chained
   * deadlines; default 300000 (Redisson's fairLockWaitTimeout). Queued
   * waiters retry every third of it. On a lock shared with Redisson, use
   * Redisson's value: each Redisson acquisition takes its own allowance
   * off every queued deadline. */
  int64_t fair_wait_timeout_ms;
  /* 1: dlock_client_open succeeds even when the server cannot be reached
   * (the URL, and a server that answers, are still checked); calls fail
   * with DLOCK_EIO until it can. For RedLock nodes that may be down at
   * start. Default 0. */
  int lazy_connect;
  dlock_lost_cb on_lost; /* default NULL */
  void *on_lost_data;

  /* ---- Fields up to here are those of dlock 0.1. ----
   * The size of the caller's dlock_options_t, set by dlock_options_init():
   * the library reads only that many bytes, and gives every field it does
   * not find there its default. So fields added in later versions, which
   * go at the end, below this one, never make the library read past the
   * struct of a program built against an older dlock.h. A program built
   * against a newer dlock.h than the library's may pass a larger struct:
   * the fields the library does not know must then be left zero, as
   * dlock_options_init() leaves them, or dlock_client_open() refuses the
   * options with DLOCK_EINVAL rather than ignore them. A struct filled by
   * hand without dlock_options_init() (struct_size 0) is read as the
   * layout of dlock 0.2; calling dlock_options_init() first is always
   * right. Do not set this field yourself. */
  size_t struct_size;

  /* ---- Added in dlock 0.2 ---- */
  /* Told about a deployment that can break locks (see dlock_client_open). */
  dlock_warning_cb on_warning; /* default NULL: warnings are dropped */
  void *on_warning_data;

  /* TLS, used with rediss:// URLs only.
   * Every connection of a client to a rediss:// URL checks the server's
   * certificate chain against the trusted CAs and its name against the
   * URL's host (or tls_server_name). The files are read at open and not
   * kept; the strings are not kept either. Setting any of these with a
   * redis:// or unix:// URL is refused (DLOCK_EINVAL), since a program
   * that asks for TLS must not quietly get a plain connection. */
  /* PEM file of the CA certificates to trust. With tls_ca_dir also NULL
   * (the default), the system's (OpenSSL's default paths). */
  const char *tls_ca_file;
  /* Directory of CA certificates, named by hash as "openssl rehash"
   * makes them. */
  const char *tls_ca_dir;
  /* Client certificate (PEM; a chain may follow it) and its private key
   * (PEM, not encrypted), for servers that require one (mutual TLS:
   * "tls-auth-clients yes"). Both or neither. */
  const char *tls_cert_file;
  const char *tls_key_file;
  /* The name sent in SNI and checked against the server's certificate;
   * NULL (default): the URL's host. For a server reached by an address or
   * an alias its certificate does not name. */
  const char *tls_server_name;
  /* 1: check neither the chain nor the name. The connection is encrypted
   * but anybody in the path can pose as the server: for tests only.
   * Default 0. */
  int tls_insecure;

  /* ---- Replicated Redis (see "Replicated Redis" below). These come after
   * the fields a struct filled by hand (struct_size 0) is read with: such
   * a struct gets their defaults. ---- */
  /* 1 (default): after every write that grants, renews, releases or hands
   * over a lock or a permit, wait for replicas to acknowledge it (WAIT, in
   * the same round trip); 0: do not. */
  int replica_sync;
  /* How many replicas must acknowledge each such write. 0 (default): as
   * many as the master has in step, as its INFO replication says (state
   * online, acknowledged within 2 s; read at the first write and again
   * every second, in the round trip of a write), or through Sentinel as
   * many as the Sentinels list and do not flag down (the one a failover
   * under way is promoting included); a master without replicas then asks
   * for none. N > 0:
   * exactly N, whatever the master has. At most DLOCK_REPLICAS_MAX. */
  int replica_sync_replicas;
  /* How long a write waits for them; default 1000 (Redisson's
   * slavesSyncTimeout). It may exceed command_timeout_ms: a write that
   * carries a WAIT is given both before it counts as unanswered. */
  int64_t replica_sync_timeout_ms;
  /* How long a call keeps trying while Redis cannot be reached or answers
   * "not now" (a failover or a restart under way: a connection refused or
   * reset, READONLY, LOADING, MASTERDOWN, too few replicas), when the call
   * has no wait of its own to bound it: dlock_lock, dlock_unlock, a
   * dlock_trylock with DLOCK_WAIT_FOREVER, and dlock_client_open through
   * Sentinel or Cluster (see there). A dlock_trylock with a wait
   * keeps trying within its wait. Default 30000; 0..DLOCK_DURATION_MAX_MS.
   * 0: every call fails at the first such error, as dlock 0.1 did. */
  int64_t outage_wait_ms;

  /* ---- Seeing locks at work (after dlock 0.2) ---- */
  /* Told of every event (see dlock_event_cb); default NULL: no event is
   * built, which costs one branch per place an event could come from. */
  dlock_event_cb on_event;
  void *on_event_data;
  /* 1: keep no statistics (dlock_client_stats then reports zeros), unless
   * on_event is set, which needs them kept. Default 0: statistics are
   * kept (see dlock_client_stats). */
  int stats_off;

  /* ---- Redisson's choices (after dlock 0.2) ---- */
  /* Which acknowledgements replica sync asks for (see "Replicated Redis"
   * below): DLOCK_SYNC_ALL (0, default), every replica counted, or
   * DLOCK_SYNC_ANY, Redisson's rule (checkLockSyncedSlaves): WAITAOF when
   * the master has AOF on, WAIT otherwise, and a write counts as synced
   * when at least one replica acknowledged it. */
  int replica_sync_mode;
  /* How a spin lock's waiter pauses between attempts, as Redisson's
   * LockOptions name the two: DLOCK_BACKOFF_EXPONENTIAL (0, default), 1 ms
   * doubling to 128 ms, each pause a random time between half and the
   * whole of its step; or DLOCK_BACKOFF_CONSTANT, 64 ms every time. */
  int spin_backoff;
  /* How long, in us, a blocking call waiting for Redis's reply keeps
   * looking at its socket before it sleeps: DLOCK_SPIN_US_DEFAULT (50) by
   * default, 0 never, at most DLOCK_SPIN_US_MAX. On loopback or a fast
   * network most replies come within 50 us, and taking them without the
   * sleep and the wake-up can more than halve a lone caller's round trip
   * on an idle machine, as the JVM's and Go's runtimes do for Redisson
   * and redsync (on a quiet 2-core VM, 50 us gave 2.5 x the lock+unlock
   * pairs per second of one thread, with 16 threads and 4 processes of 4
   * threads on one lock unharmed; see the README's "Performance"). It
   * costs processor time while it looks, so the client looks only while a
   * single request is in flight on the connection, in at most one thread
   * less than the processors online per process, and stops looking for a
   * while after a few looks that caught nothing. Set 0 where processor
   * time matters more than latency (many processes on a busy machine). A
   * client on Redis Cluster, and an async client, never look. */
  int64_t spin_us;
} dlock_options_t;

/* The default and the largest spin_us accepted. */
#define DLOCK_SPIN_US_DEFAULT 50
#define DLOCK_SPIN_US_MAX 10000

/* The largest replica_sync_replicas accepted. */
#define DLOCK_REPLICAS_MAX 1000

/* replica_sync_mode: wait for every replica counted; or for them all, but
 * count a write synced once one of them has it (Redisson's rule). */
#define DLOCK_SYNC_ALL 0
#define DLOCK_SYNC_ANY 1

/* spin_backoff: Redisson's ExponentialBackOff and ConstantBackOff, with
 * their default delays. */
#define DLOCK_BACKOFF_EXPONENTIAL 0
#define DLOCK_BACKOFF_CONSTANT 1

/*
 * Replicated Redis: a master with replicas, failed over by Sentinel.
 *
 * Sentinel. A redis-sentinel:// URL lists Sentinels (host[:port], port
 * 26379 by default, [v6] hosts too) and the name of the master they
 * monitor. user:pass are the data nodes' (the master's and its
 * replicas'); Sentinels that require a password of their own get it in
 * the query, sentinel_password=P (and sentinel_user=U for an ACL user);
 * db=N selects a database; values may be %-encoded. At each (re)connect
 * the client tries the master it knew, else asks the Sentinels in turn
 * (SENTINEL GET-MASTER-ADDR-BY-NAME; one that is down is passed over), and
 * checks with ROLE on the new connection that the address is a master, so
 * that nothing is written to a replica a stale Sentinel still names. A
 * thread subscribed to +switch-master on one Sentinel learns of a failover
 * at once: nothing more is sent to the old master, which can take writes
 * until Sentinel demotes it.
 *
 * TLS through Sentinel. rediss-sentinel://, with the same syntax, speaks
 * TLS to every Sentinel and to every data node, with the client's tls_*
 * options (one CA, client certificate and server name for all of them).
 * It fits a deployment whose Sentinels listen on tls-port and run with
 * tls-replication yes (as do the data nodes): the Sentinels then name the
 * data nodes' TLS ports. Sentinels reached in plain text that hand out TLS
 * data ports, or the reverse, are not supported.
 *
 * Replica sync (replica_sync, on by default). Redis replicates
 * asynchronously: a lock the master granted but had not yet sent to a
 * replica is gone after a failover to that replica, and granted again.
 * So every write that changes a lock or a permit is followed, in the same
 * round trip, by "WAIT n replica_sync_timeout_ms", and the answer checked:
 *
 *  - An acquisition (every single-lock kind, a semaphore's permits, an
 *    expirable permit) that fewer than n replicas acknowledged is not
 *    reported held: it is given back on the master at once (or, when
 *    Redis does not answer that, as soon as it does), and the call fails
 *    with DLOCK_ENOSYNC, detail "... only a of n replicas acknowledged
 *    it". dlock_trylock with a wait, and dlock_lock, try again within
 *    their wait (see outage_wait_ms), as after a connection error.
 *  - A lock handed over by a release (to a waiter of the same client, or
 *    a fair lock's next in line) is confirmed by its new holder with a
 *    renewal of its own, sent with WAIT: acknowledged, it holds everything
 *    written before it, the hand-over included. Unconfirmed, it is given
 *    back and the waiter goes on waiting (or fails with DLOCK_ENOSYNC).
 *  - A renewal round that fell short renews the leases on the master only:
 *    it confirms none of them, and a lock whose lease runs out without a
 *    renewal that the replicas acknowledged is reported lost (on_lost,
 *    then DLOCK_ELOST), as when Redis cannot be reached.
 *  - A release that fell short is done on the master and reported done. A
 *    failover can then bring the lock back until its lease ends: it keeps
 *    others waiting that long, and is never granted twice.
 *
 * n is replica_sync_replicas, or by default the replicas the master has in
 * step (INFO replication: state online, acknowledged within 2 s), or,
 * through Sentinel, those the Sentinels see up and replicating (SENTINEL
 * REPLICAS; a replica that turned master under its master, being
 * promoted, included), or the master's own count when larger. Through
 * Sentinel the count is believed only from a Sentinel that names the
 * master the client writes to (one naming another sends the client to
 * look the master up again, and the write is not sent), and a write whose
 * master moved (+switch-master) before its WAIT was answered is not synced
 * (DLOCK_ENOSYNC, "... written while the master moved ..."): a failover's
 * old master takes writes that its departing replicas acknowledge and then
 * drop. A master without replicas waits for none, and gives no
 * replication guarantee. Redisson, which sends the same WAIT, accepts one
 * acknowledgement; dlock asks for every replica in step by default.
 *
 * Redisson's rule (replica_sync_mode = DLOCK_SYNC_ANY). The same writes
 * wait for the same n replicas, but one acknowledgement is enough: only a
 * write that no replica acknowledged counts as not synced (and is given
 * back and refused with DLOCK_ENOSYNC, "only 0 of n", as above). A master
 * with AOF on (appendonly yes) that knows WAITAOF (Redis 7.2 and later,
 * Valkey) is asked with "WAITAOF 1 n timeout", as Redisson asks it: the
 * master's own fsync and n replicas' fsyncs, acknowledgements counting
 * the replicas that fsynced; any other master with WAIT. dlock learns
 * both from the master's INFO (all its default sections, read where
 * INFO replication is otherwise) before its first write, or through
 * Sentinel within a second of it (WAIT until then). A replica may report
 * an fsync only with its acknowledgement of the next second, so with
 * WAITAOF keep replica_sync_timeout_ms above 1000 (Redisson's default
 * slavesSyncTimeout is 1000): a shorter one can find no acknowledgement
 * on a healthy replica. What it guarantees is less: a lock reported held
 * is on one replica, and a failover that promotes another loses it.
 * Where Redisson differs: on a single-server config it sends no WAIT at
 * all; it counts the replicas connected (connected_slaves) where dlock
 * counts those in step (a replica silent for over 2 s is not waited
 * for; set replica_sync_replicas to wait for a fixed number, as for the
 * replicas connected). Both give an unsynced acquisition back; Redisson
 * then tries again, retryAttempts times (4 by default), even a tryLock
 * without a wait, where dlock_trylock with wait 0 does not retry.
 *
 * WAIT holds up the
 * client's shared connection while it waits: a replica that stops
 * acknowledging delays every write by up to the sync timeout until it is
 * no longer counted. A RedLock's parts are synced too, each node's WAIT
 * pipelined after its script: a part its node's replicas did not
 * acknowledge is given back and does not count towards the majority (a
 * node whose acknowledgements come after the majority is settled once they
 * do). Its releases are sent without WAIT.
 *
 * What that guarantees: a lock reported held is on n replicas. Sentinel
 * promotes the replica with the most data (among those of the best
 * replica-priority), so a failover keeps the lock unless every replica
 * that acknowledged it is lost with the master, or a replica that did not
 * is promoted (it was not in step, or has a better priority). The fencing
 * counter is written by the same script, so tokens keep increasing across
 * such a failover; a failover that loses writes (sync off, a master
 * without replicas, the cases above) can issue a token twice. A holder
 * paused past its lease is not helped by any of this: the token is.
 *
 * Riding out a failover (outage_wait_ms). While the master is down and
 * being replaced, calls see refused or reset connections, READONLY (a
 * demoted master), LOADING, MASTERDOWN, NOREPLICAS or DLOCK_ENOSYNC. A
 * dlock_trylock with a wait, dlock_lock, dlock_unlock, MultiLock and
 * RedLock acquisitions with a wait (a RedLock when too few nodes answer),
 * dlock_psem_acquire and dlock_latch_await keep trying
 * through these, with a back-off (20 ms to 640 ms) and rediscovery at
 * each reconnect, until their wait, or outage_wait_ms, runs out; then they
 * fail with the last error. An acquisition retried this way is safe: one
 * that got no answer is given back first (see dlock_trylock), and the
 * scripts set the owner's count from the client's. The watchdog keeps
 * renewing through the failover; a lock the failover lost is reported
 * (on_lost, DLOCK_ELOST), never quietly taken again. Queries
 * (dlock_is_locked, ...) and dlock_trylock with wait 0 do not retry.
 * dlock_sem_acquire retries only failures that took nothing (a refusal,
 * DLOCK_ENOSYNC): a plain semaphore's permits have no owner, and an
 * unanswered attempt retried could take them twice for good. An expirable
 * permit is retried under a new id (the unanswered one is given back when
 * Redis answers, or comes back at its lease end).
 */

/*
 * Fills the first 'size' bytes of 'o' with the defaults above and records
 * 'size' in o->struct_size. Call it through dlock_options_init(), which
 * passes the size of the caller's own dlock_options_t.
 */
DLOCK_EXPORT void dlock_options_init_size(dlock_options_t *o, size_t size);

/* Fills 'o' with the defaults above. Inline, so that the size passed is
 * that of the dlock.h the program was compiled with. */
static inline void dlock_options_init(dlock_options_t *o) {
  dlock_options_init_size(o, sizeof(*o));
}

/*
 * Connects to the server named by 'o->url' (authenticating and selecting
 * the database it names), starts the client's background threads and stores
 * the new client in '*out'. Fails with DLOCK_EINVAL for a bad URL or option,
 * DLOCK_EIO when the server cannot be reached, DLOCK_EAUTH for a refused
 * password and DLOCK_EPROTO when what answers is not Redis. Through
 * Sentinel or Cluster, an open that finds a failover under way (the
 * Sentinels name a master that does not answer yet, or no master serves
 * a cluster's slots yet) tries again for outage_wait_ms before it fails
 * with DLOCK_EIO; a URL that never worked fails at once. With
 * 'o->on_warning' set, it also reads the server's maxmemory-policy (one
 * more round trip) and warns, before returning, when it may evict locks.
 */
DLOCK_EXPORT int dlock_client_open(const dlock_options_t *o,
                                   dlock_client_t **out);

/*
 * Makes every call blocked on 'c' (waiting for a lock or for Redis) return
 * DLOCK_ECANCELED soon, and every later call fail with it. A fair-lock
 * waiter that is canceled still leaves the queue on its way out. Safe to
 * call from any thread, and more than once; not from a signal handler. In
 * a child of fork() it does nothing: the calls it would cancel are the
 * parent's.
 */
DLOCK_EXPORT void dlock_client_shutdown(dlock_client_t *c);

/*
 * Stops the watchdog and the background threads and frees 'c'. Locks still
 * held are not released: they expire by their lease (a watchdog lock within
 * watchdog_timeout_ms). No other thread may be using 'c'. NULL is ignored.
 * In a child of fork() it only frees memory (see fork() above).
 */
DLOCK_EXPORT void dlock_client_close(dlock_client_t *c);

/* The client UUID used in owner fields ("<id>:<owner>"). Owned by 'c'. */
DLOCK_EXPORT const char *dlock_client_id(const dlock_client_t *c);

/*
 * The owner number of the calling thread: unique within the process for its
 * whole life, never reused after the thread exits.
 */
DLOCK_EXPORT uint64_t dlock_self(void);

/* A fresh owner number, never used by any thread, for owners that are not
 * threads (a task handed from thread to thread). */
DLOCK_EXPORT uint64_t dlock_owner_new(void);

/* -------------------------------------------------------------------------
 * Locks
 * ------------------------------------------------------------------------- */

/*
 * Creates a handle on the reentrant lock 'name' (Redisson's getLock). The
 * handle is cheap and holds no server state; any number of handles on one
 * name share the same lock. 'name' must be 1..DLOCK_NAME_MAX bytes.
 * The handle must be freed before its client is closed.
 *
 * Every constructor of a single lock comes in two forms, with the same
 * arguments in the same order: dlock_get_X(c, name, out) for a C string,
 * and dlock_getn_X(c, name, len, out) for a name of 'len' bytes that may
 * contain NULs: dlock_get/dlock_getn, dlock_get_fair/dlock_getn_fair,
 * dlock_get_spin/dlock_getn_spin, dlock_get_rw/dlock_getn_rw.
 * dlock_get_kind picks the kind at run time.
 */
DLOCK_EXPORT int dlock_get(dlock_client_t *c, const char *name, dlock_t **out);
DLOCK_EXPORT int dlock_getn(dlock_client_t *c, const char *name, size_t len,
                            dlock_t **out);

/*
 * The lock kinds. Every kind is a dlock_t driven by the same verbs; each
 * stores its state in Redisson's layout for the matching Redisson object.
 */
typedef enum dlock_kind {
  DLOCK_REENTRANT = 0,    /* RLock: exclusive, reentrant, pub/sub wake-up */
  DLOCK_FAIR,             /* RFairLock: FIFO across threads and processes */
  DLOCK_SPIN,             /* RSpinLock: no pub/sub, exponential back-off */
  DLOCK_READ,             /* RReadWriteLock.readLock(): shared */
  DLOCK_WRITE,            /* RReadWriteLock.writeLock(): exclusive */
  DLOCK_MULTI,            /* RedissonMultiLock: all of several locks */
  DLOCK_RED,              /* RedissonRedLock: a majority of independent nodes */
  DLOCK_NONREENTRANT,     /* getNonReentrantLock: RLock without reentry */
  DLOCK_NONREENTRANT_FAIR /* getNonReentrantFairLock: the same, FIFO */
} dlock_kind_t;

/*
 * Creates a handle of 'kind' (one of the single-lock kinds: DLOCK_REENTRANT
 * to DLOCK_WRITE, DLOCK_NONREENTRANT, DLOCK_NONREENTRANT_FAIR) on 'name'
 * of 'len' bytes (NULs allowed).
 */
DLOCK_EXPORT int dlock_get_kind(dlock_client_t *c, dlock_kind_t kind,
                                const char *name, size_t len, dlock_t **out);

/*
 * A fair lock: waiters get it in the order they asked, across threads and
 * processes, Redisson's RFairLock waiters included. They queue in
 * "redisson_lock_queue:{name}" with deadlines in
 * "redisson_lock_timeout:{name}", chained as Redisson chains them (each
 * one allowance after the one ahead). A queued waiter tries again at least
 * every third of the client's fair_wait_timeout_ms, which keeps its
 * deadline ahead; a dlock waiter that vanishes (its process died) is
 * dropped by dlock's scripts fair_wait_timeout_ms after its last try,
 * however many dead waiters are ahead of it, so the queue never wedges.
 * Only the head waiter is woken on release. dlock_trylock with wait 0 does
 * not queue.
 */
DLOCK_EXPORT int dlock_get_fair(dlock_client_t *c, const char *name,
                                dlock_t **out);
DLOCK_EXPORT int dlock_getn_fair(dlock_client_t *c, const char *name,
                                 size_t len, dlock_t **out);

/*
 * A spin lock: the reentrant lock's layout, but waiters retry with
 * exponential back-off (1 ms doubling to 128 ms, with jitter) instead of
 * pub/sub, for deployments where pub/sub is unavailable or too costly.
 * The client's spin_backoff option picks Redisson's constant back-off
 * (64 ms) instead.
 */
DLOCK_EXPORT int dlock_get_spin(dlock_client_t *c, const char *name,
                                dlock_t **out);
DLOCK_EXPORT int dlock_getn_spin(dlock_client_t *c, const char *name,
                                 size_t len, dlock_t **out);

/*
 * Non-reentrant locks (Redisson's getNonReentrantLock and
 * getNonReentrantFairLock): the reentrant lock and the fair lock, in the
 * same layout (so they exclude, and wake, RLock and RFairLock holders and
 * waiters on the same name), except that an owner that holds one and asks
 * for it again is refused at once, by dlock_lock and dlock_trylock alike,
 * with DLOCK_EINVAL (detail "... is not reentrant and this owner holds it
 * already"); its hold is unchanged. Redisson throws
 * IllegalMonitorStateException there. Other owners wait as for the
 * reentrant (or fair) lock; unlock, the watchdog and the wake-ups are
 * theirs. The client's own record of its holds tells a second hold, as
 * only the client writes its owners' fields: one owner number used from
 * two threads at once (see dlock_owner_new) is not told apart.
 */
DLOCK_EXPORT int dlock_get_nonreentrant(dlock_client_t *c, const char *name,
                                        dlock_t **out);
DLOCK_EXPORT int dlock_getn_nonreentrant(dlock_client_t *c, const char *name,
                                         size_t len, dlock_t **out);
DLOCK_EXPORT int dlock_get_nonreentrant_fair(dlock_client_t *c,
                                             const char *name, dlock_t **out);
DLOCK_EXPORT int dlock_getn_nonreentrant_fair(dlock_client_t *c,
                                              const char *name, size_t len,
                                              dlock_t **out);

/*
 * A read-write lock: '*read' and '*write' are two handles on it. Many
 * owners may hold the read lock at once, or one the write lock. Both are
 * reentrant. The owner of the write lock may also take the read lock
 * (downgrade: take read, then release write); an owner holding only the
 * read lock who asks for the write lock waits like anyone else, and would
 * wait for ever for its own read hold (there is no upgrade). Each read hold
 * has its own lease; the lock expires with the longest remaining one.
 * Releasing the write lock wakes every waiter.
 */
DLOCK_EXPORT int dlock_get_rw(dlock_client_t *c, const char *name,
                              dlock_t **read, dlock_t **write);
DLOCK_EXPORT int dlock_getn_rw(dlock_client_t *c, const char *name, size_t len,
                               dlock_t **read, dlock_t **write);

/*
 * A MultiLock over 'n' handles (any kinds but DLOCK_MULTI/DLOCK_RED,
 * possibly from different clients): acquired only when all are, all or
 * nothing. When one is taken it releases what it took, waits for that one,
 * and tries again within the wait time, so two callers asking for
 * overlapping sets in different orders never deadlock. An attempt sends
 * the acquisition of every reentrant and spin lock among them at once (on
 * one server in one pipelined round trip, on a cluster to every master at
 * the same time), and a release their releases likewise; other kinds are
 * taken one after the other. The handles are not copied: they must
 * outlive the MultiLock, and are not freed with it.
 */
DLOCK_EXPORT int dlock_get_multi(dlock_t *const *locks, size_t n,
                                 dlock_t **out);

/*
 * A RedLock over 'n' handles from 'n' clients on independent Redis masters.
 * Each attempt goes to all nodes at once (a node not connected yet connects
 * meanwhile) and takes the replies as they come. Once a majority granted,
 * a node that has not answered within three times as long (and at least
 * 50 ms) is not waited for: what its attempt may have taken is given back
 * when it answers, and it is not asked again until then. So a paused node
 * costs an attempt a little, not a command timeout. An attempt succeeds
 * when a majority (n/2+1) granted the lock and the validity (lease -
 * elapsed - (lease/100 + 2 ms)) is still positive; otherwise it is released
 * on every node and the attempt fails (DLOCK_ENOQUORUM when a majority
 * could not even be asked).
 * With DLOCK_WATCHDOG each node's lock is renewed by its client; dlock_unlock
 * returns DLOCK_ELOST when fewer than a majority were still held.
 * The fencing token is the largest of the nodes' tokens, written back to
 * the nodes that granted the lock so that any later majority (which shares
 * a node with this one) issues a larger one; it is strictly increasing as
 * long as those write-backs succeed and nodes keep their counters. The
 * handles must outlive the RedLock and are not freed with it.
 */
DLOCK_EXPORT int dlock_get_red(dlock_t *const *locks, size_t n, dlock_t **out);

/* The kind of a handle. */
DLOCK_EXPORT dlock_kind_t dlock_kind(const dlock_t *l);

/* Frees the handle (not the lock: holds stay held). NULL is ignored. */
DLOCK_EXPORT void dlock_free(dlock_t *l);

/* The lock name and its length; owned by 'l'. */
DLOCK_EXPORT const char *dlock_name(const dlock_t *l, size_t *len);

/*
 * Acquires the lock for the calling thread, waiting as long as it takes.
 * 'lease_ms' 1..DLOCK_DURATION_MAX_MS: the lock expires after it unless
 * unlocked first; DLOCK_WATCHDOG: it is held until unlocked, renewed in the
 * background. Any other lease fails with DLOCK_EINVAL.
 * Reentrant: an owner that holds the lock gets it again (the count goes up;
 * it takes as many unlocks). Returns 0, or DLOCK_ECANCELED, DLOCK_EIO, ...
 */
DLOCK_EXPORT int dlock_lock(dlock_t *l, int64_t lease_ms);

/*
 * Like dlock_lock but gives up after 'wait_ms' (0: a single attempt; at most
 * DLOCK_DURATION_MAX_MS; DLOCK_WAIT_FOREVER: no limit) with DLOCK_ETIMEDOUT.
 *
 * An attempt that fails without an answer (DLOCK_EIO at the command
 * timeout, a connection that failed, DLOCK_ECANCELED at shutdown) may
 * still run in Redis: a stalled server runs it when it goes on. Whatever
 * it was granted (the lock, one more count of a hold the owner had, a
 * fair lock's queue place) is the owner's without its knowing, so the
 * client gives it back as soon as Redis answers again, in the background,
 * leaving the owner exactly the holds it had. The owner's next lock or
 * unlock of that lock settles it first, and fails like the attempt while
 * Redis still does not answer. What is not given back: an attempt still
 * in the network when the client gave up on its connection that reaches
 * Redis after the client settled it, or one whose client was closed
 * first. Such a grant expires with its lease (watchdog_timeout_ms for
 * DLOCK_WATCHDOG), a fair queue place after fair_wait_timeout_ms.
 */
DLOCK_EXPORT int dlock_trylock(dlock_t *l, int64_t wait_ms, int64_t lease_ms);

/*
 * Releases one hold of the calling thread; the lock is free when the count
 * reaches 0, and one waiter per process is woken. Returns 0;
 * DLOCK_ENOTHELD when this owner holds nothing; DLOCK_ELOST when this owner
 * held it but it expired or was deleted meanwhile (the critical section may
 * have overlapped with another holder's). A lost lock that was taken n
 * times reports DLOCK_ELOST to each of its n unlocks; until they are done,
 * the owner's dlock_lock on it fails with DLOCK_ELOST too, rather than
 * quietly start a new hold inside a critical section that lost its
 * protection. An unlock whose reply is lost (a
 * timeout, a dropped connection) is sent again, up to unlock_retries times,
 * each with its own command timeout; the retry cannot release twice. When
 * every attempt failed (DLOCK_EIO), a last hold is no longer renewed: it
 * expires with its lease. A failed unlock still consumes its hold: do not
 * call dlock_unlock again for it; the owner's next call brings Redis in
 * line (the last hold is released then, an inner one counted off).
 */
DLOCK_EXPORT int dlock_unlock(dlock_t *l);

/* The same verbs with an explicit owner instead of the calling thread. */
DLOCK_EXPORT int dlock_lock_as(dlock_t *l, uint64_t owner, int64_t lease_ms);
DLOCK_EXPORT int dlock_trylock_as(dlock_t *l, uint64_t owner, int64_t wait_ms,
                                  int64_t lease_ms);
DLOCK_EXPORT int dlock_unlock_as(dlock_t *l, uint64_t owner);

/*
 * Deletes the lock whoever holds it and wakes its waiters. Returns 1 when a
 * lock was deleted, 0 when there was none. The key is checked first, in
 * the same script that deletes it: when it holds anything but a lock of
 * the handle's kind (a string, a list, a hash that is not a lock, or a
 * read-write lock through a reentrant, fair or spin handle and the
 * reverse), nothing is deleted and DLOCK_ENOTLOCK is returned.
 */
DLOCK_EXPORT int dlock_force_unlock(dlock_t *l);

/*
 * Questions to Redis about the lock. Each asks Redis, so each can fail.
 *
 * CAUTION: the four calls below return a NEGATIVE DLOCK_E* CODE WHEN REDIS
 * CANNOT ANSWER, and a negative number is true in C: "if (dlock_is_held(l))"
 * takes the branch when Redis is down. Compare with 1 ("== 1", "> 0"), or
 * use the dlock_query_* calls further down, which keep the answer and the
 * error apart.
 */

/* 1 when anyone holds the lock, 0 when it is free, or a negative code. */
DLOCK_EXPORT int dlock_is_locked(dlock_t *l);

/* 1 when the calling thread (or 'owner') holds the lock, 0 when not, or a
 * negative code. */
DLOCK_EXPORT int dlock_is_held(dlock_t *l);
DLOCK_EXPORT int dlock_is_held_as(dlock_t *l, uint64_t owner);

/* The hold count of the calling thread (or 'owner'), >= 0, or a negative
 * code. */
DLOCK_EXPORT int dlock_hold_count(dlock_t *l);
DLOCK_EXPORT int dlock_hold_count_as(dlock_t *l, uint64_t owner);

/* The time to expiry of a lock held without one (set so by some other
 * program), in dlock_ttl(), dlock_query_ttl(), dlock_info_t.ttl_ms and the
 * ttl_ms of "dlock status --json": larger than any real time to expiry, so
 * "ttl >= needed" reads right without a special case. */
#define DLOCK_NO_EXPIRY INT64_MAX

/*
 * Milliseconds until the lock expires; 0 when nobody holds it;
 * DLOCK_NO_EXPIRY when it is held without expiry; or a negative code.
 */
DLOCK_EXPORT int64_t dlock_ttl(dlock_t *l);

/*
 * The same questions in a form that cannot be misread: each returns 0 and
 * stores the answer in '*out', or returns a negative DLOCK_E* code and
 * stores 0 there. "if (dlock_query_held(l, &held) == 0 && held)" is the
 * whole idiom.
 *
 *   dlock_query_locked      1 when anyone holds the lock, else 0
 *   dlock_query_held[_as]   1 when the caller (or 'owner') holds it, else 0
 *   dlock_query_hold_count[_as]  the caller's (or 'owner''s) count, >= 0
 *   dlock_query_ttl         ms to expiry, 0 when free, DLOCK_NO_EXPIRY
 */
DLOCK_EXPORT int dlock_query_locked(dlock_t *l, int *out);
DLOCK_EXPORT int dlock_query_held(dlock_t *l, int *out);
DLOCK_EXPORT int dlock_query_held_as(dlock_t *l, uint64_t owner, int *out);
DLOCK_EXPORT int dlock_query_hold_count(dlock_t *l, int *out);
DLOCK_EXPORT int dlock_query_hold_count_as(dlock_t *l, uint64_t owner,
                                           int *out);
DLOCK_EXPORT int dlock_query_ttl(dlock_t *l, int64_t *out);

/*
 * The fencing token of the calling thread's (or 'owner''s) hold, 0 if it
 * holds none. Tokens come from the counter "redisson_lock_token:{name}",
 * incremented on every free->held transition, so a later holder always has a
 * larger token; a reentrant acquisition keeps its token. Pass it to the
 * protected resource, which refuses writes with a token lower than the
 * largest it has seen. Answered locally, without a round trip; 0 in a child
 * of fork() (see above).
 */
DLOCK_EXPORT uint64_t dlock_token(dlock_t *l);
DLOCK_EXPORT uint64_t dlock_token_as(dlock_t *l, uint64_t owner);

/* -------------------------------------------------------------------------
 * Inspection (what "dlock status" shows)
 * ------------------------------------------------------------------------- */

typedef struct dlock_holder {
  char *owner;   /* the hash field: "<client-id>:<owner>" (or ":write") */
  int64_t count; /* hold count */
} dlock_holder_t;

typedef struct dlock_waiter {
  char *owner;         /* fair-lock queue entry */
  int64_t deadline_ms; /* Unix time (ms) after which it is dropped */
} dlock_waiter_t;

typedef struct dlock_info {
  int locked;     /* 1 held, 0 free */
  int64_t ttl_ms; /* as dlock_ttl(): 0 free, DLOCK_NO_EXPIRY, else ms */
  uint64_t token; /* last fencing token issued (0: never) */
  char *mode;     /* read-write lock "read"/"write"; else NULL */
  size_t nholders;
  dlock_holder_t *holders;
  size_t nwaiters; /* fair-lock queue, head first */
  dlock_waiter_t *waiters;
} dlock_info_t;

/*
 * Reads everything known about lock 'name' (any kind, taken by dlock or by
 * Redisson) into a new '*out', freed with dlock_info_free().
 */
DLOCK_EXPORT int dlock_inspect(dlock_client_t *c, const char *name, size_t len,
                               dlock_info_t **out);

/* The same for the lock of handle 'l' (a single lock, not a MultiLock or
 * RedLock: those span several keys, or servers; inspect their parts). */
DLOCK_EXPORT int dlock_inspect_lock(dlock_t *l, dlock_info_t **out);

DLOCK_EXPORT void dlock_info_free(dlock_info_t *info);

/* -------------------------------------------------------------------------
 * Plain commands on the client's connection
 * ------------------------------------------------------------------------- */

typedef enum dlock_reply_type {
  DLOCK_REPLY_NIL = 0, /* a missing value */
  DLOCK_REPLY_INTEGER, /* 'integer' (RESP3 booleans too: 0 or 1) */
  DLOCK_REPLY_STRING,  /* 'str' of 'len' bytes (bulk, verbatim, doubles) */
  DLOCK_REPLY_STATUS,  /* 'str': a simple string such as "OK" */
  DLOCK_REPLY_ARRAY,   /* 'elements' (maps: key, value, key, value...) */
  DLOCK_REPLY_ERROR    /* 'str': an error inside an array (a script's) */
} dlock_reply_type_t;

typedef struct dlock_reply {
  dlock_reply_type_t type;
  int64_t integer;
  char *str; /* NUL-terminated too (it may hold NULs: use 'len') */
  size_t len;
  size_t nelements;
  struct dlock_reply *elements; /* 'nelements' replies */
} dlock_reply_t;

/*
 * Runs one Redis command, 'argc' arguments of 'lens[i]' bytes each ('lens'
 * NULL: each is a NUL-terminated string), on the connection the client's
 * locks use: the same server and database, password, timeouts and
 * reconnection, so a program needs no second Redis client for a few data
 * commands beside its locks. On success '*out' is the reply, freed with
 * dlock_reply_free(). An error reply is returned as its code (DLOCK_ESERVER,
 * DLOCK_EAUTH, ...) with Redis's text in dlock_last_error(), and '*out'
 * NULL.
 *
 * The connection is shared with every lock of the client, so commands that
 * would change its state or hold it up are refused with DLOCK_EINVAL:
 * SELECT, AUTH, HELLO, RESET, QUIT, CLIENT REPLY, MULTI/EXEC/DISCARD/WATCH,
 * the (un)subscribe family, MONITOR, replication commands, and blocking
 * ones (BLPOP, BRPOP, BLMOVE, BZPOPMIN, XREAD ... BLOCK, WAIT, ...). Use a
 * client library of your own for those.
 */
DLOCK_EXPORT int dlock_client_command(dlock_client_t *c, size_t argc,
                                      const char *const *argv,
                                      const size_t *lens, dlock_reply_t **out);

/* Frees a reply of dlock_client_command(). NULL is ignored. */
DLOCK_EXPORT void dlock_reply_free(dlock_reply_t *r);

/* -------------------------------------------------------------------------
 * Event loops
 *
 * A client opened with dlock_client_open_async() has no threads of its own
 * and never blocks: every verb takes a callback, and the client does its
 * I/O only when the application's event loop tells it that one of its
 * descriptors is ready or that its timer ran out. The integration follows
 * libcurl's multi-socket interface:
 *
 *   - the client calls 'on_socket' for each descriptor it wants watched,
 *     with DLOCK_POLL_IN and/or DLOCK_POLL_OUT, and with DLOCK_POLL_REMOVE
 *     when the descriptor is to be forgotten (it may be closed after);
 *   - it calls 'on_timer' with the milliseconds until it next needs to be
 *     called (0: as soon as possible), or -1 when it needs no timer;
 *   - the loop calls dlock_loop_action() with a descriptor and what it is
 *     ready for, or with DLOCK_SOCKET_TIMEOUT when the timer ran out;
 *   - last, when the client is closed, 'on_socket' is called once with fd
 *     -1 and DLOCK_POLL_REMOVE: the loop may free what it keeps for it.
 *
 * Both callbacks may be called from dlock_loop_attach(), from
 * dlock_loop_action() and from any verb. Every operation's callback runs
 * exactly once, from dlock_loop_action() (never from the call that started
 * it), on the loop's thread; it may start new operations, free its handle
 * (when that has no other operation pending) or close the client.
 * dlock_last_error() gives the detail of a failure inside the callback.
 * Ready-made adapters: <dlock/adapters/libuv.h> and
 * <dlock/adapters/libevent.h>. The README has a plain epoll loop.
 *
 * An async client serves one server (redis://, rediss://, unix://), a
 * Sentinel-managed master (redis-sentinel://) or a Redis Cluster
 * (redis-cluster://: a descriptor per node), and
 * the single-lock kinds (reentrant, fair, read, write, spin), MultiLocks and
 * RedLocks whose parts are all on async clients (driven by one thread),
 * semaphores, expirable-permit semaphores and latches; the blocking
 * verbs on it fail with DLOCK_EINVAL rather than block the loop, as do the
 * async verbs on a blocking client. Locks are owned by explicit owners
 * (dlock_owner_new()), since one loop thread serves many.
 * ------------------------------------------------------------------------- */

#define DLOCK_POLL_IN 1
#define DLOCK_POLL_OUT 2
#define DLOCK_POLL_REMOVE 4
#define DLOCK_SOCKET_TIMEOUT (-1)

typedef void (*dlock_socket_cb)(dlock_client_t *c, int fd, int what,
                                void *data);
typedef void (*dlock_timer_cb)(dlock_client_t *c, int64_t timeout_ms,
                               void *data);

/* Opens a client that does nothing until dlock_loop_attach(): no thread,
 * no connection. Options as for dlock_client_open(). */
DLOCK_EXPORT int dlock_client_open_async(const dlock_options_t *o,
                                         dlock_client_t **out);

/* Gives the client its loop's callbacks (once). */
DLOCK_EXPORT int dlock_loop_attach(dlock_client_t *c, dlock_socket_cb on_socket,
                                   dlock_timer_cb on_timer, void *data);

/* The loop saw 'fd' ready for 'events' (DLOCK_POLL_IN/OUT; an error or
 * hang-up counts as both), or its timer ran out (fd DLOCK_SOCKET_TIMEOUT).
 * Returns 0, or DLOCK_EINVAL for a client that is not async. */
DLOCK_EXPORT int dlock_loop_action(dlock_client_t *c, int fd, int events);

/* How many operations are in progress on the loop: those the application
 * started whose callback has not run yet (a MultiLock or RedLock counts
 * once per part), and the loop's own (watchdog renewals, give-backs of
 * what a cancelled operation was granted, a cluster's slot-map reads).
 * 0 means that the loop has nothing left to do but wait for wake-ups. */
DLOCK_EXPORT size_t dlock_loop_pending(const dlock_client_t *c);

/* The end of an operation on 'l' for 'owner': 'status' 0 or a DLOCK_E*
 * code (dlock_last_error() has its detail while the callback runs). After
 * a grant, dlock_token_as(l, owner) gives the fencing token. */
typedef void (*dlock_done_cb)(dlock_t *l, uint64_t owner, int status,
                              void *data);

/* dlock_trylock_as(), dlock_lock_as() and dlock_unlock_as() for an async
 * client. They return 0 when the operation started (its callback will
 * run), or an error with the callback never called. */
DLOCK_EXPORT int dlock_trylock_async(dlock_t *l, uint64_t owner,
                                     int64_t wait_ms, int64_t lease_ms,
                                     dlock_done_cb cb, void *data);
DLOCK_EXPORT int dlock_lock_async(dlock_t *l, uint64_t owner, int64_t lease_ms,
                                  dlock_done_cb cb, void *data);
DLOCK_EXPORT int dlock_unlock_async(dlock_t *l, uint64_t owner,
                                    dlock_done_cb cb, void *data);

/* The reply of a plain command, 'reply' NULL unless 'status' is 0; it is
 * the callback's to free with dlock_reply_free(). */
typedef void (*dlock_reply_cb)(dlock_client_t *c, int status,
                               dlock_reply_t *reply, void *data);

/* dlock_client_command() for an async client: the same rules. */
DLOCK_EXPORT int dlock_client_command_async(dlock_client_t *c, size_t argc,
                                            const char *const *argv,
                                            const size_t *lens,
                                            dlock_reply_cb cb, void *data);

/* -------------------------------------------------------------------------
 * Semaphores and count-down latches
 *
 * Three more of Redisson's objects, in its layout, so that C programs and
 * Java services using Redisson share them by name:
 *
 *   semaphore (RSemaphore)             key "name": the free permits, a
 *                                      string; channel "redisson_sc:{name}"
 *   expirable-permit semaphore         the same key and channel, and the
 *     (RPermitExpirableSemaphore)      zset "{name}:timeout": permit id (16
 *                                      bytes) -> Unix ms its lease ends
 *   count-down latch (RCountDownLatch) key "name": the count, a string;
 *                     channel "redisson_countdownlatch__channel__{name}"
 *
 * (Without braces around a name that contains '{', as for locks; the
 * latch's channel always has them, as in Redisson.) A release publishes
 * the number of free permits on the channel, and waiters of each client
 * wake as many of themselves as there are permits: waiting is by pub/sub,
 * never by polling.
 *
 * Handles are cheap, hold no server state, may be shared between threads,
 * and must be freed (dlock_*_free, which ignores NULL) before their client
 * is closed. Names are 1..DLOCK_NAME_MAX bytes and may contain NULs (the
 * *_getn forms). Bad arguments (zero or negative permits, more permits
 * than exist or than were acquired, a count below zero) fail with
 * DLOCK_EINVAL or DLOCK_ENOTHELD and change nothing, in Redis or in the
 * client. A key that holds something else (a hash, a list, a string that
 * is not a number) fails with DLOCK_ENOTLOCK, untouched.
 * ------------------------------------------------------------------------- */

/* The most permits a semaphore has or a call asks for: Redisson counts
 * them in a Java int. */
#define DLOCK_PERMITS_MAX INT64_C(2147483647)

typedef struct dlock_sem dlock_sem_t;

/*
 * A semaphore (Redisson's RSemaphore): permits are a number in Redis,
 * taken and given back by anyone. A permit is not owned and has no lease:
 * a process that dies with permits keeps them taken for good (use the
 * expirable-permit semaphore below when that matters). The client counts
 * the permits acquired through it, across its handles and threads, and
 * releases no more than that (dlock_sem_add_permits adds permits that were
 * never acquired).
 */
DLOCK_EXPORT int dlock_sem_get(dlock_client_t *c, const char *name,
                               dlock_sem_t **out);
DLOCK_EXPORT int dlock_sem_getn(dlock_client_t *c, const char *name, size_t len,
                                dlock_sem_t **out);
DLOCK_EXPORT void dlock_sem_free(dlock_sem_t *s);
DLOCK_EXPORT const char *dlock_sem_name(const dlock_sem_t *s, size_t *len);

/*
 * Sets the semaphore's permits to 'permits' (0..DLOCK_PERMITS_MAX) if it
 * has none set yet (Redisson's trySetPermits), and wakes its waiters.
 * Returns 1 when set, 0 when it had permits already (left as they were),
 * or a negative code.
 */
DLOCK_EXPORT int dlock_sem_try_set_permits(dlock_sem_t *s, int64_t permits);

/*
 * Adds 'delta' permits (1..DLOCK_PERMITS_MAX), or takes -delta free
 * permits away (Redisson's addPermits). Taking away more than are free
 * fails with DLOCK_EINVAL and changes nothing. Stores the free permits
 * after the change in '*free_after' (may be NULL).
 */
DLOCK_EXPORT int dlock_sem_add_permits(dlock_sem_t *s, int64_t delta,
                                       int64_t *free_after);

/*
 * Takes 'permits' (1..DLOCK_PERMITS_MAX) permits at once, waiting up to
 * 'wait_ms' (0: a single try; DLOCK_WAIT_FOREVER) for that many to be free;
 * DLOCK_ETIMEDOUT when they were not. A waiter sleeps until a release
 * announces free permits. An attempt that got no answer (DLOCK_EIO,
 * DLOCK_ECANCELED) may have taken the permits all the same; they are not
 * given back (nothing tells them apart from anyone else's).
 */
DLOCK_EXPORT int dlock_sem_acquire(dlock_sem_t *s, int64_t permits,
                                   int64_t wait_ms);

/*
 * Gives back 'permits' (1..DLOCK_PERMITS_MAX) permits acquired through
 * this client (any handle or thread of it) and wakes waiters.
 * DLOCK_ENOTHELD, changing nothing, when the client acquired fewer. A
 * release without an answer (DLOCK_EIO) is not sent again (it could give
 * back twice); the client counts the permits as given back.
 */
DLOCK_EXPORT int dlock_sem_release(dlock_sem_t *s, int64_t permits);

/* The permits the client acquired on this semaphore and still has, >= 0;
 * answered locally. */
DLOCK_EXPORT int64_t dlock_sem_held(dlock_sem_t *s);

/* The free permits into '*out' (0 when none were ever set). */
DLOCK_EXPORT int dlock_sem_available(dlock_sem_t *s, int64_t *out);

/* Takes every free permit (Redisson's drainPermits); '*out' (may be NULL)
 * is how many that was. They count as acquired by this client. */
DLOCK_EXPORT int dlock_sem_drain(dlock_sem_t *s, int64_t *out);

typedef struct dlock_psem dlock_psem_t;

/* The longest text form of a permit id, with its NUL. */
#define DLOCK_PERMIT_ID_MAX 33

/* One permit of an expirable-permit semaphore. */
typedef struct dlock_permit {
  /* 32 lowercase hex digits, Redisson's form (its zset stores the 16
   * bytes they spell); what dlock_psem_release takes. */
  char id[DLOCK_PERMIT_ID_MAX];
  /* The fencing token of this acquisition: a counter
   * ("dlock_permit_token:{name}") incremented by every one, so a later
   * acquisition always has a larger token. */
  uint64_t token;
  /* The number on_lost is called with for this permit (its 'owner'). */
  uint64_t owner;
  /* The Unix time in ms at which the lease ends, by Redis's clock, as of
   * the acquisition (a permit renewed by the watchdog lasts longer). */
  int64_t expires_ms;
} dlock_permit_t;

/*
 * An expirable-permit semaphore (Redisson's RPermitExpirableSemaphore):
 * each acquisition takes one permit with an id and a lease. A permit whose
 * lease ends comes back to the semaphore (at the next call of anyone that
 * looks at it, dlock's or Redisson's), so a crashed holder's permit is not
 * lost for good. With DLOCK_WATCHDOG the client's watchdog renews the
 * lease (watchdog_timeout_ms) every third of it while the permit is held;
 * a renewal that finds the permit gone, or a lease that ran out without
 * one, reports it lost: on_lost(name, permit.owner) at once, and
 * DLOCK_ELOST from its release.
 */
DLOCK_EXPORT int dlock_psem_get(dlock_client_t *c, const char *name,
                                dlock_psem_t **out);
DLOCK_EXPORT int dlock_psem_getn(dlock_client_t *c, const char *name,
                                 size_t len, dlock_psem_t **out);
DLOCK_EXPORT void dlock_psem_free(dlock_psem_t *s);
DLOCK_EXPORT const char *dlock_psem_name(const dlock_psem_t *s, size_t *len);

/* As dlock_sem_try_set_permits and dlock_sem_add_permits; taking away
 * permits takes only free ones. */
DLOCK_EXPORT int dlock_psem_try_set_permits(dlock_psem_t *s, int64_t permits);
DLOCK_EXPORT int dlock_psem_add_permits(dlock_psem_t *s, int64_t delta,
                                        int64_t *free_after);

/*
 * Takes one permit, waiting up to 'wait_ms' (0: a single try;
 * DLOCK_WAIT_FOREVER) with DLOCK_ETIMEDOUT when none came free, for
 * 'lease_ms' (1..DLOCK_DURATION_MAX_MS, or DLOCK_WATCHDOG: held until
 * released, renewed in the background). Fills '*permit'. A waiter sleeps
 * until a release announces a free permit, or the first lease of the
 * permits taken ends. An attempt without an answer is given back at once
 * if Redis answers that; otherwise the permit, if it was taken, comes
 * back when its lease ends (watchdog_timeout_ms for DLOCK_WATCHDOG).
 */
DLOCK_EXPORT int dlock_psem_acquire(dlock_psem_t *s, int64_t wait_ms,
                                    int64_t lease_ms, dlock_permit_t *permit);

/*
 * Gives back the permit 'id' (dlock_permit_t.id; one taken by another
 * client or by Redisson may be given too) and wakes waiters. Returns 0;
 * DLOCK_ELOST when its lease had ended first (it was given back if still
 * there: another holder may have had it meanwhile); DLOCK_ENOTHELD when
 * no such permit is taken (never acquired, or released already);
 * DLOCK_EINVAL for an id that is not 32 hex digits.
 */
DLOCK_EXPORT int dlock_psem_release(dlock_psem_t *s, const char *id);

/* The free permits, and the permits taken, into '*free_out' and
 * '*taken_out' (either may be NULL), after giving back those whose lease
 * ended. The semaphore has *free_out + *taken_out permits in all. */
DLOCK_EXPORT int dlock_psem_count(dlock_psem_t *s, int64_t *free_out,
                                  int64_t *taken_out);

/* ---- count-down latches ---- */

typedef struct dlock_latch dlock_latch_t;

/*
 * A count-down latch (Redisson's RCountDownLatch): a count in Redis that
 * anyone counts down; waiters wake when it reaches zero, at which point
 * the key is deleted (so a latch at zero and one never set look the same,
 * and await returns at once for both).
 */
DLOCK_EXPORT int dlock_latch_get(dlock_client_t *c, const char *name,
                                 dlock_latch_t **out);
DLOCK_EXPORT int dlock_latch_getn(dlock_client_t *c, const char *name,
                                  size_t len, dlock_latch_t **out);
DLOCK_EXPORT void dlock_latch_free(dlock_latch_t *l);
DLOCK_EXPORT const char *dlock_latch_name(const dlock_latch_t *l, size_t *len);

/* Sets the count (1..2^53) if the latch has none (Redisson's trySetCount):
 * 1 set, 0 it had one (left as it was), or a negative code. */
DLOCK_EXPORT int dlock_latch_try_set_count(dlock_latch_t *l, int64_t count);

/* Counts down by one; at zero every waiter of every client wakes. '*left'
 * (may be NULL) is the count after it. DLOCK_EINVAL, changing nothing,
 * when the latch is at zero or has no count: it never goes below zero. */
DLOCK_EXPORT int dlock_latch_count_down(dlock_latch_t *l, int64_t *left);

/* The count into '*out': 0 when at zero or never set. */
DLOCK_EXPORT int dlock_latch_count(dlock_latch_t *l, int64_t *out);

/* Waits until the count is zero, up to 'wait_ms' (0: just look;
 * DLOCK_WAIT_FOREVER): 0, or DLOCK_ETIMEDOUT. Sleeps until the latch's
 * zero message. */
DLOCK_EXPORT int dlock_latch_await(dlock_latch_t *l, int64_t wait_ms);

/* ---- semaphores and latches on an event loop ---- */

/* The end of a semaphore's or a latch's operation on an async client (see
 * "Event loops"): 'status' 0 or a DLOCK_E* code; 'value' is the count
 * left after a latch's count-down, else 0. Each verb returns 0 when the
 * operation started (its callback runs once, from the loop), or an error
 * with the callback never called. */
typedef void (*dlock_sem_cb)(dlock_sem_t *s, int status, void *data);
typedef void (*dlock_latch_cb)(dlock_latch_t *l, int status, int64_t value,
                               void *data);

/* dlock_sem_acquire() and dlock_sem_release(). */
DLOCK_EXPORT int dlock_sem_acquire_async(dlock_sem_t *s, int64_t permits,
                                         int64_t wait_ms, dlock_sem_cb cb,
                                         void *data);
DLOCK_EXPORT int dlock_sem_release_async(dlock_sem_t *s, int64_t permits,
                                         dlock_sem_cb cb, void *data);
/* dlock_latch_await() and dlock_latch_count_down(). */
DLOCK_EXPORT int dlock_latch_await_async(dlock_latch_t *l, int64_t wait_ms,
                                         dlock_latch_cb cb, void *data);
DLOCK_EXPORT int dlock_latch_count_down_async(dlock_latch_t *l,
                                              dlock_latch_cb cb, void *data);

/* The end of an expirable-permit semaphore's operation on an async client:
 * 'status' as for dlock_sem_cb; 'permit' is the permit taken when an
 * acquisition succeeded (valid while the callback runs: copy what is
 * kept), else NULL. */
typedef void (*dlock_psem_cb)(dlock_psem_t *s, int status,
                              const dlock_permit_t *permit, void *data);

/* dlock_psem_acquire(): one permit, its id, token and lease end given to
 * 'cb'. With DLOCK_WATCHDOG the loop's watchdog renews it. A permit
 * granted and not yet reported when the client is closed is given back. */
DLOCK_EXPORT int dlock_psem_acquire_async(dlock_psem_t *s, int64_t wait_ms,
                                          int64_t lease_ms, dlock_psem_cb cb,
                                          void *data);
/* dlock_psem_release(): the same answers, by 'cb' (with 'permit' NULL). */
DLOCK_EXPORT int dlock_psem_release_async(dlock_psem_t *s, const char *id,
                                          dlock_psem_cb cb, void *data);

/* ---- inspection ---- */

typedef struct dlock_permit_info {
  char id[DLOCK_PERMIT_ID_MAX]; /* hex; Redisson's id text */
  int64_t expires_ms; /* Unix ms its lease ends; DLOCK_NO_EXPIRY: never */
} dlock_permit_info_t;

typedef struct dlock_counter_info {
  int exists;      /* 1: the key holds a number */
  int64_t count;   /* a semaphore's free permits, or a latch's count */
  int64_t ttl_ms;  /* as dlock_info_t.ttl_ms */
  int expirable;   /* 1: "{name}:timeout" holds permits (an expirable-
                      permit semaphore) */
  size_t npermits; /* the permits taken, the first lease to end first */
  dlock_permit_info_t *permits;
} dlock_counter_info_t;

/*
 * Reads semaphore or latch 'name' (a string counter, and the permits of an
 * expirable-permit semaphore) into a new '*out', freed with
 * dlock_counter_info_free(). Read-only: permits whose lease ended are
 * listed, not taken back. DLOCK_ENOTLOCK when 'name' holds something that
 * is not a counter (a lock's hash, say); '*out' is then NULL.
 */
DLOCK_EXPORT int dlock_inspect_counter(dlock_client_t *c, const char *name,
                                       size_t len, dlock_counter_info_t **out);
DLOCK_EXPORT void dlock_counter_info_free(dlock_counter_info_t *info);

/* -------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------- */

/*
 * Buckets of a latency histogram: bucket i counts the samples of at most
 * 2^i microseconds that did not fit bucket i-1 (1 us, 2 us, 4 us, ... about
 * 36 minutes); the last counts the longer ones. Not cumulative.
 */
#define DLOCK_STATS_BUCKETS 33

typedef struct dlock_histogram {
  uint64_t count;  /* samples */
  uint64_t sum_us; /* their sum */
  uint64_t max_us; /* the largest */
  uint64_t buckets[DLOCK_STATS_BUCKETS];
} dlock_histogram_t;

/*
 * The value below which a fraction 'q' (0..1) of the samples of 'h' lie,
 * in microseconds, as the upper bound of the bucket it falls in (never
 * more than h->max_us); 0 without samples. q = 0.5 is the median, 0.99 the
 * 99th percentile.
 */
DLOCK_EXPORT uint64_t dlock_histogram_quantile(const dlock_histogram_t *h,
                                               double q);

/* How many of the most contended lock names the statistics keep. */
#define DLOCK_STATS_TOP 32
/* How much of a lock name they keep (longer names are cut). */
#define DLOCK_STATS_NAME_MAX 63

/* A lock name that callers had to wait for. */
typedef struct dlock_lock_stats {
  char name[DLOCK_STATS_NAME_MAX + 1]; /* NUL-terminated, maybe cut */
  size_t name_len;                     /* the bytes kept in 'name' */
  uint64_t waits;    /* acquisitions that waited (an upper bound, see below) */
  uint64_t timeouts; /* of those, the ones that ended without the lock */
  uint64_t wait_us;  /* their total wait */
} dlock_lock_stats_t;

/* Counters indexed by -code of a DLOCK_E* error: failed_by_code[1] counts
 * DLOCK_EINVAL, and so on; codes past the end are counted in the last. */
#define DLOCK_STATS_CODES 24

/*
 * What a group of statistics, and an event, is about: the single locks
 * (reentrant, fair, spin, read, write), or another kind of object. The
 * name is the value of the 'kind' label in the Prometheus text.
 */
typedef enum dlock_stats_kind {
  DLOCK_STATS_LOCK = 0,  /* "lock" */
  DLOCK_STATS_SEMAPHORE, /* "semaphore": dlock_sem_t permits */
  DLOCK_STATS_PSEM,      /* "psem": dlock_psem_t expirable permits */
  DLOCK_STATS_LATCH,     /* "latch": dlock_latch_await */
  DLOCK_STATS_MULTILOCK, /* "multilock": a MultiLock as a whole */
  DLOCK_STATS_REDLOCK,   /* "redlock": a RedLock as a whole */
  DLOCK_STATS_KINDS
} dlock_stats_kind_t;

/* The name of 'kind' ("lock", "semaphore", ...); "?" when unknown. */
DLOCK_EXPORT const char *dlock_stats_kind_name(int kind);

/*
 * The acquisitions of one kind of object other than the single locks
 * (dlock_stats_t.semaphore and the fields after it), counted as the
 * single locks' are in dlock_stats_t: one per acquiring call, whatever
 * its end.
 */
typedef struct dlock_kind_stats {
  uint64_t acquired;         /* granted (a latch: the await found it at zero) */
  uint64_t refused;          /* a try without a wait found none to take */
  uint64_t timed_out;        /* a wait ran out */
  uint64_t failed;           /* ended with another error */
  uint64_t waits;            /* acquisitions that had to wait */
  uint64_t released;         /* release or unlock calls that succeeded */
  dlock_histogram_t acquire; /* every acquisition call, whatever its end */
  dlock_histogram_t wait;    /* the acquisitions that waited */
  dlock_histogram_t hold;    /* acquisition to release, where there is one */
} dlock_kind_stats_t;

/*
 * The statistics of a client since it was opened: counters that only
 * grow, and latency histograms. Filled by dlock_client_stats().
 *
 * Each acquiring call is counted once, under what it acquired. A
 * MultiLock or a RedLock is counted as a whole, in 'multilock' or
 * 'redlock', and its parts are not counted again as single locks: not
 * in 'acquired' and the results beside it, 'reentrant', 'waits',
 * 'released', 'unlocks' or the single locks' histograms, whether it is
 * taken by the blocking or the async verbs. A part's wait still counts
 * for its name among the most contended names ('top'), and a part found
 * lost still counts in 'lost': those name the lock that is hot or gone.
 * Semaphores, expirable permits and latches count in their own groups
 * (dlock_kind_stats_t), never in the single locks' counters. Reconnects
 * of the pub/sub connections are counted apart from those of the
 * command connections, in 'pubsub_reconnects'.
 */
typedef struct dlock_stats {
  /* Set by dlock_client_stats(): the size of the caller's struct. The
   * library writes only that many bytes, so that fields added later, at
   * the end, never make an older program's struct overflow. */
  size_t struct_size;
  int enabled; /* 0 when the client was opened with stats_off */
  /* Acquisitions of single locks (reentrant, fair, spin, read, write),
   * not of a composite's parts (see above). */
  uint64_t acquired;  /* granted (reentrant ones included) */
  uint64_t reentrant; /* of those, by an owner that held it already */
  uint64_t refused;   /* a try without a wait found it taken */
  uint64_t timed_out; /* a wait ran out with the lock still taken */
  uint64_t failed;    /* ended with another error */
  uint64_t failed_by_code[DLOCK_STATS_CODES];
  uint64_t waits;          /* acquisitions that had to wait */
  uint64_t released;       /* an owner's last hold given back */
  uint64_t unlocks;        /* dlock_unlock calls that succeeded */
  uint64_t unlock_retries; /* unlocks sent again after a lost reply */
  uint64_t handovers;      /* releases that handed a lock to a waiter */
  uint64_t lost;           /* holds found lost */
  /* Background work. */
  uint64_t watchdog_rounds;
  uint64_t renewed;         /* holds renewed by those rounds */
  uint64_t sync_waits;      /* writes followed by a replica-sync WAIT */
  uint64_t sync_shortfalls; /* ... that too few replicas acknowledged */
  /* Connections and topology. */
  uint64_t reconnects;     /* connections made again after a failure */
  uint64_t failovers;      /* new masters followed (Sentinel) */
  uint64_t redirections;   /* cluster MOVED and ASK replies followed */
  uint64_t script_reloads; /* NOSCRIPT answered by loading the script */
  uint64_t commands;       /* commands queued on the data connections */
  uint64_t pipelines;      /* writes that sent them (one or many each) */
  uint64_t messages;       /* pub/sub messages read */
  uint64_t wakeups;        /* waiters woken by them */
  /* Latencies. */
  dlock_histogram_t acquire; /* every acquisition call, whatever its end */
  dlock_histogram_t wait;    /* the acquisitions that waited */
  dlock_histogram_t hold;    /* from acquisition to last release */
  /* The most contended lock names, most waits first. Counted with the
   * space-saving rule: when more names wait than there is room for, a new
   * name replaces the least waited one and inherits its count, so a
   * count is exact for a name that stayed in the table and an upper
   * bound otherwise; a name waited on more often than 1/DLOCK_STATS_TOP
   * of all waits is always listed. */
  size_t ntop;
  dlock_lock_stats_t top[DLOCK_STATS_TOP];
  /* Added after the fields above (a program built against an older
   * dlock.h has a struct_size that stops before them). */
  uint64_t pubsub_reconnects; /* pub/sub connections made again */
  /* Plain semaphores: acquisitions of permits (dlock_sem_acquire, and
   * its async form), and releases. Their permits have no owner, so that
   * there is no hold time ('hold' stays empty). */
  dlock_kind_stats_t semaphore;
  /* Expirable permits (dlock_psem_acquire); 'hold' runs from a permit's
   * acquisition to its release by this client. */
  dlock_kind_stats_t psem;
  /* Latch awaits: 'acquired' found it at zero, 'timed_out' ran out first;
   * nothing is held ('released' and 'hold' stay 0). */
  dlock_kind_stats_t latch;
  /* MultiLocks and RedLocks as wholes; 'hold' runs from the acquisition
   * to the unlock that let go of the parts. A RedLock never waits on a
   * holder (it tries rounds of its nodes), so that its 'waits' stay 0;
   * a MultiLock waits when one of its parts is taken. */
  dlock_kind_stats_t multilock;
  dlock_kind_stats_t redlock;
} dlock_stats_t;

/*
 * Copies the statistics of 'c' into the first 'size' bytes of 's' (see
 * struct_size). The counters are read one by one without stopping the
 * client, so that two of them may be a moment apart. Call it through
 * dlock_client_stats().
 */
DLOCK_EXPORT void dlock_client_stats_size(dlock_client_t *c, dlock_stats_t *s,
                                          size_t size);

static inline void dlock_client_stats(dlock_client_t *c, dlock_stats_t *s) {
  dlock_client_stats_size(c, s, sizeof(*s));
}

/*
 * Renders 's' in the Prometheus text exposition format (version 0.0.4),
 * for an application's /metrics page:
 * dlock_acquisitions_total{kind=...,result=...}, dlock_waits_total{kind},
 * dlock_releases_total{kind}, the dlock_wait_seconds, dlock_hold_seconds
 * and dlock_acquire_seconds histograms by kind (the 'kind' label is
 * dlock_stats_kind_name(): "lock" for the single locks), and
 * dlock_locks_lost_total, dlock_pubsub_reconnects_total and the others,
 * each with HELP and TYPE lines; the contended names as
 * dlock_lock_waits_total{lock="..."}. Fields past the caller's
 * 's->struct_size' are not read (they are rendered as 0).
 * 'labels', when not NULL or "", is added to every sample, as written
 * (for example "client=\"billing\""). Writes at most 'cap' bytes,
 * NUL-terminated when 'cap' > 0, and returns the length of the whole text
 * (without the NUL), as snprintf does: a return of 'cap' or more means it
 * was cut.
 */
DLOCK_EXPORT size_t dlock_stats_format(const dlock_stats_t *s,
                                       const char *labels, char *buf,
                                       size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
