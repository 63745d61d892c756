#include "json.h"

/*
 * Returns the length of the valid UTF-8 sequence starting at 's' (at most
 * 'avail' bytes), or 0 when the bytes there are not valid UTF-8. Overlong
 * forms and surrogates count as invalid, as RFC 3629 requires.
 */
static size_t utf8_sequence_length(const unsigned char *s, size_t avail) {
  size_t need;
  unsigned int min, cp;

  if (s[0] < 0x80)
    return 1;
  if ((s[0] & 0xE0) == 0xC0) {
    need = 2, min = 0x80, cp = s[0] & 0x1F;
  } else if ((s[0] & 0xF0) == 0xE0) {
    need = 3, min = 0x800, cp = s[0] & 0x0F;
  } else if ((s[0] & 0xF8) == 0xF0) {
    need = 4, min = 0x10000, cp = s[0] & 0x07;
  } else {
    return 0;
  }
  if (need > avail)
    return 0;
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return need;
}

static void write_escaped_ascii(FILE *out, unsigned char c) {
  switch (c) {
  case '"':
    fputs("\\\"", out);
    break;
  case '\\':
    fputs("\\\\", out);
    break;
  case '\n':
    fputs("\\n", out);
    break;
  case '\r':
    fputs("\\r", out);
    break;
  case '\t':
    fputs("\\t", out);
    break;
  default:
    if (c < 0x20 || c == 0x7F)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
}

void json_write_string(FILE *out, const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;

  fputc('"', out);
  while (i < len) {
    size_t n = utf8_sequence_length(p + i, len - i);
    if (n == 0) {
      fputs("\\ufffd", out);
      i++;
    } else if (n == 1) {
      write_escaped_ascii(out, p[i]);
      i++;
    } else {
      fwrite(p + i, 1, n, out);
      i += n;
    }
  }
  fputc('"', out);
}
