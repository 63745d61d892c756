#include "width.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Decodes the UTF-8 sequence at 's': its length (1 to 4) and code point,
 * or 0 when it is not well-formed (a stray continuation byte, a truncated
 * or overlong sequence, a surrogate, or beyond U+10FFFF).
 */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp) {
  size_t len;
  uint32_t min;

  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  if (s[0] >= 0xC2 && s[0] <= 0xDF) {
    len = 2, min = 0x80, *cp = s[0] & 0x1Fu;
  } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
    len = 3, min = 0x800, *cp = s[0] & 0x0Fu;
  } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
    len = 4, min = 0x10000, *cp = s[0] & 0x07u;
  } else {
    return 0;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0; /* also stops at the terminating NUL */
    *cp = (*cp << 6) | (s[i] & 0x3Fu);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF))
    return 0;
  return len;
}

char *width_visible_copy(const char *s) {
  char *out = malloc(strlen(s) * 4 + 1);
  char *o = out;
  const unsigned char *p = (const unsigned char *)s;

  if (out == NULL)
    return NULL;
  while (*p) {
    uint32_t cp;
    size_t len = utf8_decode(p, &cp);
    if (len == 0 || cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
      /* One byte at a time: an escaped C1 control is two bytes. */
      size_t n = len == 0 ? 1 : len;
      for (size_t i = 0; i < n; i++)
        o += sprintf(o, "\\x%02x", p[i]);
      p += n;
    } else {
      memcpy(o, p, len);
      o += len;
      p += len;
    }
  }
  *o = '\0';
  return out;
}

typedef struct range {
  uint32_t lo, hi;
} range_t;

/* Combining marks and zero-width characters: no column of their own. */
static const range_t zero_width[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A},
    {0x064B, 0x065F}, {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x1AB0, 0x1AFF},
    {0x1DC0, 0x1DFF}, {0x200B, 0x200F}, {0x2060, 0x2064}, {0x20D0, 0x20FF},
    {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}};

/* East Asian wide and fullwidth characters and emoji: two columns. */
static const range_t double_width[] = {
    {0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},
    {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
    {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE30, 0xFE4F},
    {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x1F300, 0x1F64F},
    {0x1F900, 0x1F9FF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};

static int in(const range_t *r, size_t n, uint32_t cp) {
  for (size_t i = 0; i < n; i++)
    if (cp >= r[i].lo && cp <= r[i].hi)
      return 1;
  return 0;
}

size_t width_of(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t columns = 0;

  while (*p) {
    uint32_t cp;
    size_t len = utf8_decode(p, &cp);
    if (len == 0) {
      /* Not what width_visible_copy makes; count the byte as a column. */
      columns++;
      p++;
      continue;
    }
    if (in(double_width, sizeof double_width / sizeof double_width[0], cp))
      columns += 2;
    else if (!in(zero_width, sizeof zero_width / sizeof zero_width[0], cp))
      columns += 1;
    p += len;
  }
  return columns;
}

void width_print_padded(FILE *out, const char *s, size_t columns) {
  fputs(s, out);
  for (size_t w = width_of(s); w < columns; w++)
    fputc(' ', out);
}
