/*
 * Semaphores, expirable-permit semaphores and count-down latches: their
 * calls, built but not sent, and the decoding of their replies into
 * outcomes, for the engine to send and wait with (engine/counter.h); and
 * what they share with the watchdog. Nothing here does I/O, waits or
 * takes a mutex, so it can be tried without a server.
 *
 * Their holds live in the client's hold table (holds.h) beside the locks',
 * under kinds of their own that no dlock_kind_t uses:
 *
 *   DLOCK__KIND_SEM     one record per client and semaphore (owner 0): the
 *                       permits acquired through the client, so that it
 *                       releases no more than that. Never renewed.
 *   DLOCK__KIND_PERMIT  one record per permit of an expirable-permit
 *                       semaphore, its owner a random number that, with
 *                       the client's, makes the permit id (see
 *                       dlock__permit_id); renewed by the watchdog when
 *                       taken with DLOCK_WATCHDOG.
 */
#ifndef DLOCK_SEM_KINDS_H
#define DLOCK_SEM_KINDS_H

#include "client.h"
#include "scripts.h"

#include <stdint.h>

#define DLOCK__KIND_SEM 64
#define DLOCK__KIND_PERMIT 65

/* The bytes of a permit id, as Redisson stores it in "{name}:timeout". */
#define DLOCK__PERMIT_ID_BYTES 16

/* The largest count of a latch: Lua, which runs the scripts, counts in
 * doubles. */
#define DLOCK__LATCH_COUNT_MAX INT64_C(9007199254740992)

extern const dlock__script dlock__script_sem_set;
extern const dlock__script dlock__script_sem_add;
extern const dlock__script dlock__script_sem_acquire;
extern const dlock__script dlock__script_sem_release;
extern const dlock__script dlock__script_sem_drain;
extern const dlock__script dlock__script_psem_acquire;
extern const dlock__script dlock__script_psem_release;
extern const dlock__script dlock__script_psem_renew;
extern const dlock__script dlock__script_psem_count;
extern const dlock__script dlock__script_latch_set;
extern const dlock__script dlock__script_latch_count_down;

/* The id of the permit that 'owner' stands for in client 'c': 8 bytes
 * that stand for the client (a hash of its id), then the owner, both
 * big-endian. */
void dlock__permit_id(const dlock_client_t *c, uint64_t owner,
                      unsigned char out[DLOCK__PERMIT_ID_BYTES]);

/* "{name}:timeout" (or "name:timeout" when the name holds a '{'), where an
 * expirable-permit semaphore keeps its permits; freed with dlock__free. */
int dlock__permit_zset(const char *name, size_t len, char **out,
                       size_t *out_len);

/* A permit id in hexadecimal, as dlock_permit_t shows it: 'n' bytes into
 * 2n digits and a NUL. */
void dlock__permit_hex(const unsigned char *b, size_t n, char *out);

/* Reads the 32 hexadecimal digits of permit id 'id' into 'raw', and the
 * owner number it holds into '*owner'; '*ours' is 1 when the id was made
 * by client 'c'. 0, or DLOCK_EINVAL when it is not such an id. */
int dlock__permit_parse(const dlock_client_t *c, const char *id,
                        unsigned char raw[DLOCK__PERMIT_ID_BYTES],
                        uint64_t *owner, int *ours);

/* ---- names --------------------------------------------------------------- */

enum dlock__counter_type { DLOCK__SEM, DLOCK__PSEM, DLOCK__LATCH };

/* The names a semaphore, an expirable-permit semaphore or a latch is
 * reached by: what its calls are built from. */
typedef struct dlock__counter_names {
  char *name; /* NUL-terminated copy; may contain NULs */
  size_t len;
  /* redisson_sc:{name}, or redisson_countdownlatch__channel__{name} */
  char *channel;
  size_t channel_len;
  char *zset; /* {name}:timeout (expirable-permit semaphore only) */
  size_t zset_len;
  char *token_key; /* dlock_permit_token:{name} (the same) */
  size_t token_key_len;
} dlock__counter_names;

/* Makes the names of an object of 'type' (enum dlock__counter_type) called
 * 'name': 0, or DLOCK_ENOMEM with nothing left to free. */
int dlock__counter_names_make(int type, const char *name, size_t len,
                              dlock__counter_names *n);
void dlock__counter_names_free(dlock__counter_names *n);

/* ---- calls --------------------------------------------------------------- */

/* Room for one call's arguments, owned by the caller's stack. A script
 * call is in 'call'; a plain command (dlock__counter_get_call) is 'argc'
 * words of 'argv'. */
typedef struct dlock__counter_call {
  char n[24]; /* a number argument */
  char hex[2 * DLOCK__PERMIT_ID_BYTES + 1];
  const char *argv[8];
  size_t lens[8];
  int argc;
  dlock__eval call;
} dlock__counter_call;

/* The try-set and add calls that both semaphores share (same key, same
 * channel, same meaning): 'permits' (>= 0) set when there are none; and
 * 'magnitude' (> 0) permits added, or taken away when not 'add'. */
void dlock__sem_set_call(const dlock__counter_names *n, int64_t permits,
                         dlock__counter_call *a);
void dlock__sem_add_call(const dlock__counter_names *n, int64_t magnitude,
                         int add, dlock__counter_call *a);
/* A semaphore's: taking 'permits', giving back 'permits', taking every
 * free permit. */
void dlock__sem_acquire_call(const dlock__counter_names *n, int64_t permits,
                             dlock__counter_call *a);
void dlock__sem_release_call(const dlock__counter_names *n, int64_t permits,
                             dlock__counter_call *a);
void dlock__sem_drain_call(const dlock__counter_names *n,
                           dlock__counter_call *a);
/* GET of the object's own key (a semaphore's free permits, a latch's
 * count), a plain command. */
void dlock__counter_get_call(const dlock__counter_names *n,
                             dlock__counter_call *a);
/* An expirable-permit semaphore's: taking permit 'id' for 'lease_ms' (the
 * lease sent), giving it back, and counting the free and taken ones. */
void dlock__psem_acquire_call(const dlock__counter_names *n, int64_t lease_ms,
                              const unsigned char id[DLOCK__PERMIT_ID_BYTES],
                              dlock__counter_call *a);
void dlock__psem_release_call(const dlock__counter_names *n,
                              const unsigned char id[DLOCK__PERMIT_ID_BYTES],
                              dlock__counter_call *a);
void dlock__psem_count_call(const dlock__counter_names *n,
                            dlock__counter_call *a);
/* A latch's: setting 'count' when it has none, and counting down by one. */
void dlock__latch_set_call(const dlock__counter_names *n, int64_t count,
                           dlock__counter_call *a);
void dlock__latch_count_down_call(const dlock__counter_names *n,
                                  dlock__counter_call *a);

/* ---- outcomes ------------------------------------------------------------ */

/* A semaphore's acquisition reply {taken, free}: 0 taken, 1 not (with
 * '*pass' set when permits are free that this waiter could not use), or
 * DLOCK_EPROTO. */
int dlock__sem_acquire_outcome(const redisReply *r, int *pass);

/* What an expirable permit's acquisition reply says. */
typedef struct dlock__psem_taken {
  uint64_t token;     /* taken: the permit's fencing token */
  int64_t expires_ms; /* taken: when its lease ends (Redis time, ms) */
  int64_t sleep_ms;   /* not taken: until the first lease among the
                         permits taken ends */
} dlock__psem_taken;

/* The reply {1, token, ends} or {0, ms to the first lease's end}: 0 taken,
 * 1 not, or DLOCK_EPROTO. */
int dlock__psem_acquire_outcome(const redisReply *r, dlock__psem_taken *o);

/* The count reply {free, taken}, free given as 0 when negative. */
int dlock__psem_count_outcome(const redisReply *r, int64_t *free_permits,
                              int64_t *taken);

/* The add reply 'now' (the permits free afterwards, or < 0 when fewer than
 * 'magnitude' were free to take away): 0 with '*free_after' set (when not
 * NULL), or DLOCK_EINVAL. */
int dlock__sem_add_outcome(const dlock__counter_names *n, int64_t magnitude,
                           int64_t now, int64_t *free_after);

/* The GET reply of a semaphore (its free permits) and of a latch (its
 * count, 0 when none): 0 or DLOCK_ENOTLOCK (a server error reply is
 * reported as itself for a semaphore). */
int dlock__sem_available_outcome(const dlock__counter_names *n,
                                 const redisReply *r, int64_t *out);
int dlock__latch_count_outcome(const dlock__counter_names *n,
                               const redisReply *r, int64_t *out);

/* The count-down reply 'left' (< 0: the latch was at zero): 0 or
 * DLOCK_EINVAL. */
int dlock__latch_count_down_outcome(const dlock__counter_names *n,
                                    int64_t left);

/* The release reply 'result' of permit 'id' (1 given back within its
 * lease, 0 after it, -1 no such permit), for a permit this client had a
 * record of ('known') and found 'lost' or not: 0, DLOCK_ELOST or
 * DLOCK_ENOTHELD. */
int dlock__psem_release_outcome(const dlock__counter_names *n, const char *id,
                                int64_t result, int known, int lost);

/* ---- inspection ---------------------------------------------------------- */

enum {
  DLOCK__CQ_TYPE,
  DLOCK__CQ_GET,
  DLOCK__CQ_PTTL,
  DLOCK__CQ_ZTYPE,
  DLOCK__CQ_ZRANGE,
  DLOCK__CQ_COUNT
};

/* The commands dlock_inspect_counter sends (formatted, one per DLOCK__CQ_*)
 * for 'name', whose permits are in 'zset': 0, or DLOCK_ENOMEM. Free
 * 'cmds' with dlock__counter_queries_free either way. */
int dlock__counter_queries(const char *name, size_t len, const char *zset,
                           size_t zset_len, char **cmds, size_t *lens);
void dlock__counter_queries_free(char **cmds);

/* Decodes their replies into 'info' (zeroed by the caller): 0, or
 * DLOCK_ENOTLOCK, DLOCK_EPROTO, DLOCK_ENOMEM or a server error. */
int dlock__counter_info_decode(redisReply **r, const char *name,
                               dlock_counter_info_t *info);

#endif
