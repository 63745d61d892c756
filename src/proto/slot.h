/*
 * Redis Cluster key slots: CRC16 (XMODEM) of the key's hash tag, modulo
 * 16384, as the Redis Cluster specification defines them.
 */
#ifndef DLOCK_PROTO_SLOT_H
#define DLOCK_PROTO_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define DLOCK__SLOTS 16384

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0). */
uint16_t dlock__crc16(const char *buf, size_t len);

/*
 * The slot of 'key': when the key holds a '{' followed later by a '}' with
 * at least one byte between them, only the bytes between the first '{' and
 * the first '}' after it are hashed; otherwise the whole key is.
 */
int dlock__key_slot(const char *key, size_t len);

/* The slot of a formatted command's first argument (its key, for the
 * commands a client sends about one key), or -1 when it has none or the
 * text is not a whole RESP array of bulk strings. */
int dlock__cmd_slot(const char *cmd, size_t len);

#endif
