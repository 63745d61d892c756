/*
 * A TCP proxy in front of a real redis-server, for tests of what a client
 * does when the network misbehaves while the server itself is fine: the
 * proxy forwards both ways, and the test can make it trickle (one byte
 * every N ms each way), hold everything (black hole), or hang up.
 *
 *   tp_proxy_t *px = tp_start(rp_port(server));   // 127.0.0.1, free port
 *   o.url = tp_url(px);                           // "redis://127.0.0.1:P"
 *   tp_trickle(px, 100);  // from now on one byte per 100 ms each way,
 *                         // on open connections and new ones
 *   tp_trickle(px, 0);    // back to full speed
 *   tp_trickle_each(px, 30, 250);  // requests 30 ms a byte, replies 250
 *   tp_hold(px, 1);       // forward nothing (bytes wait in the proxy)
 *   tp_close_all(px);     // hangs up on every connection, both sides
 *   tp_free(px);
 *
 * It runs in a thread of the test. The target is 127.0.0.1:port (TCP
 * only). Every function may be called from any thread of the test.
 */
#ifndef DLOCK_TEST_TCP_PROXY_H
#define DLOCK_TEST_TCP_PROXY_H

#include <stdint.h>

typedef struct tp_proxy tp_proxy_t;

/* Starts a proxy to 127.0.0.1:'target_port'. Ends the test on failure. */
tp_proxy_t *tp_start(int target_port);
void tp_free(tp_proxy_t *px); /* NULL is ignored */

int tp_port(const tp_proxy_t *px);
const char *tp_url(const tp_proxy_t *px);

/* One byte every 'every_ms' in each direction; 0: as fast as it comes. */
void tp_trickle(tp_proxy_t *px, int64_t every_ms);

/* The same with a pace for each direction: towards the server and towards
 * the client. A reply that drips steadily (to_client_ms below a client's
 * read timeout) after a request that crawls is what defeats per-read
 * timeouts. */
void tp_trickle_each(tp_proxy_t *px, int64_t to_server_ms,
                     int64_t to_client_ms);

/* 1: forward nothing until 0 again. */
void tp_hold(tp_proxy_t *px, int on);

/* Closes every connection now, on both sides. */
void tp_close_all(tp_proxy_t *px);

/* Connections accepted so far. */
int tp_accepted(tp_proxy_t *px);

/* How many times 'needle' occurs in the bytes the clients sent that the
 * proxy has not passed on to the server yet (held, or trickling): with
 * tp_hold, what a client put on the wire before any reply could come. */
int tp_count_to_server(tp_proxy_t *px, const char *needle);

#endif
