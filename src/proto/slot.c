/*
 * Key slots (see slot.h). The table is generated once, on first use, from
 * the polynomial, rather than written out: 256 entries that nobody can
 * check by eye are a worse place for a typo than eight lines of loop.
 */
#include "slot.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static uint16_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
  for (unsigned i = 0; i < 256; i++) {
    uint16_t crc = (uint16_t)(i << 8);
    for (int b = 0; b < 8; b++)
      crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    table[i] = crc;
  }
}

uint16_t dlock__crc16(const char *buf, size_t len) {
  pthread_once(&table_once, make_table);
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++)
    crc = (uint16_t)((crc << 8) ^
                     table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]);
  return crc;
}

int dlock__key_slot(const char *key, size_t len) {
  const char *open = memchr(key, '{', len);
  if (open != NULL) {
    size_t rest = len - (size_t)(open + 1 - key);
    const char *close = memchr(open + 1, '}', rest);
    /* "{}" hashes the whole key: an empty tag would put every such key in
     * one slot. */
    if (close != NULL && close > open + 1)
      return dlock__crc16(open + 1, (size_t)(close - open - 1)) &
             (DLOCK__SLOTS - 1);
  }
  return dlock__crc16(key, len) & (DLOCK__SLOTS - 1);
}

int dlock__cmd_slot(const char *cmd, size_t len) {
  const char *end = cmd + len, *p = cmd;
  if (p >= end || *p != '*' || strtol(p + 1, NULL, 10) < 2)
    return -1;
  for (int arg = 0; arg < 2; arg++) {
    p = memchr(p, '\n', (size_t)(end - p));
    if (p == NULL || ++p >= end || *p != '$')
      return -1;
    long n = strtol(p + 1, NULL, 10);
    p = memchr(p, '\n', (size_t)(end - p));
    if (p == NULL || n < 0 || (size_t)(end - ++p) < (size_t)n)
      return -1;
    if (arg == 1)
      return dlock__key_slot(p, (size_t)n);
    p += n;
  }
  return -1;
}
