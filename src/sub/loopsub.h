/*
 * Unlock notifications for a client driven by an event loop: one pub/sub
 * connection with no thread, which the loop services (as
 * dlock__conn_service serves the command connection). Waiters join a
 * channel, shared by every waiter of the client on it, and are told by a
 * callback when Redis confirms the subscription and when a message wakes
 * them; what a message wakes is the channel's decoder's to say
 * (dlock__wake_fn), as for the threaded pub/sub (pubsub.h).
 *
 * A channel nobody waits on stays subscribed for a short while, so that a
 * lock taken and released in turn does not subscribe and unsubscribe at
 * each wait. When the connection fails, every waiter is woken (messages
 * may have been lost) and the channels are subscribed again once it is
 * back.
 */
#ifndef DLOCK_LOOPSUB_H
#define DLOCK_LOOPSUB_H

#include <stddef.h>
#include <stdint.h>

#include "link/locator.h"
#include "net/net.h"
#include "pubsub.h"
#include "url.h"

typedef struct dlock__lsub dlock__lsub;
struct dlock__lchan;

/*
 * One waiter on a channel, owned by whoever joins. 'on' is called from
 * dlock__lsub_service and dlock__lsub_pass (never from the others) with 0
 * once the
 * waiter's join is answered (the subscription is confirmed, or could not
 * be in time: the waiter then sleeps by its lock's TTL), 1 when a message
 * wakes it, 2 when the wake-up carries 'value', 3 when the server dropped the
 * channel (a sharded channel whose slot moved to another node: the waiter
 * is to leave and join again where it is now), 4 when its pin ended with
 * no wake-up, or a negative code when Redis refuses the subscription. 'on' must
 * not call into the lsub.
 */
typedef struct dlock__lwaiter {
  struct dlock__lwaiter *next;
  struct dlock__lchan *ch;
  void (*on)(struct dlock__lwaiter *w, int ev);
  void *arg;
  int joined;      /* the join is answered */
  int awake;       /* woken and not yet rearmed */
  uint64_t value;  /* what the wake-up carried */
  int64_t join_by; /* a join not answered by then counts as answered */
  /* Who the waiter is, for the rules that choose a waiter to pin (the
   * engine's; not read here), and whether it sleeps in its wait now (set
   * by its owner). */
  const void *owner_data;
  int parked;
  /* While pinned (dlock__lsub_pin_first): where the pinner keeps it,
   * cleared if it leaves before it is unpinned. */
  struct dlock__lwaiter **pin;
} dlock__lwaiter;

/* A connection to 'ep' ('tls' for rediss://, else NULL; both must outlive
 * it), or, with 'locator' (else NULL; not copied), to the master it finds
 * (Sentinel), followed to the next one when its generation moves on.
 * Nothing is connected until the first join. A locator's lookup is made
 * inside the service, and waits for the Sentinels (within the connect and
 * command timeouts). */
int dlock__lsub_new(const dlock__endpoint *ep, const dlock__tls *tls,
                    const dlock__locator *locator, int64_t connect_timeout_ms,
                    int64_t command_timeout_ms, dlock__lsub **out);

/* Subscribes with SSUBSCRIBE (a cluster's sharded pub/sub, on the node
 * serving the channels' slots), before the first join. */
void dlock__lsub_set_sharded(dlock__lsub *s);
/* Closes it; every waiter must have left. NULL is ignored. */
void dlock__lsub_free(dlock__lsub *s);

/* Counts its reconnects in 'st' (NULL: not counted; the default). */
void dlock__lsub_set_stats(dlock__lsub *s, dlock__stats *st);

/*
 * Joins 'w' to 'channel', whose messages 'wake' decodes: 1 when the
 * channel is subscribed already (joined now), 0 when the answer comes
 * later through 'w->on' (at 'deadline_us' at the latest), or DLOCK_ENOMEM.
 * With 'active_only', joins only a subscribed channel (returns 0 and does
 * nothing otherwise) and sets '*others' to the waiters already on it.
 */
int dlock__lsub_join(dlock__lsub *s, const char *channel, size_t len,
                     dlock__wake_fn wake, int64_t deadline_us,
                     dlock__lwaiter *w, int active_only, int *others);

/* Leaves; the channel is unsubscribed once nobody has waited a while. */
void dlock__lsub_leave(dlock__lsub *s, dlock__lwaiter *w);

/* Hands a wake-up 'w' cannot use to the next waiter in line not awake. */
void dlock__lsub_pass(dlock__lsub *s, dlock__lwaiter *w);

/*
 * For a release made in the loop: pins the first waiter on 'channel' that
 * is joined, not awake, not pinned and 'eligible', so that it stays in its
 * wait (its owner looks at 'pin') until dlock__lsub_unpin. '*ref' is
 * where the pinner keeps it: set to NULL if the waiter leaves first (the
 * client's close). 'note' then runs on the channel's slot with whether a
 * waiter was pinned; when it returns other than 0, none is. Messages of
 * the channel skip a pinned waiter. Returns the waiter pinned, or NULL.
 */
typedef int (*dlock__lpin_eligible_fn)(const dlock__lwaiter *w, void *arg);
typedef int (*dlock__lpin_note_fn)(void **slot, int pinned, void *arg);
dlock__lwaiter *dlock__lsub_pin_first(dlock__lsub *s, const char *channel,
                                      size_t len,
                                      dlock__lpin_eligible_fn eligible,
                                      dlock__lpin_note_fn note, void *arg,
                                      dlock__lwaiter **ref);

/* Ends the pin of 'w': runs 'fn' (NULL: nothing) on its channel's slot,
 * then wakes it with 'value' when 'wake' is set, else tells its 'on' 4
 * (look again: nothing came). */
void dlock__lsub_unpin(dlock__lsub *s, dlock__lwaiter *w, int wake,
                       uint64_t value, dlock__slot_fn fn, void *arg);

/* Runs 'fn' on the slot of the channel 'w' waits on: what the engine
 * keeps for the channel, freed (dlock__free) with it. */
void dlock__lsub_with_slot(dlock__lsub *s, dlock__lwaiter *w, dlock__slot_fn fn,
                           void *arg);

/* What the connection waits for, as dlock__conn_watch. */
void dlock__lsub_watch(dlock__lsub *s, int *fd, short *events,
                       int64_t *until_us, unsigned *socket);

/* Does everything that can be done without waiting. */
void dlock__lsub_service(dlock__lsub *s);

#endif
