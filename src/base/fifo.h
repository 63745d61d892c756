/*
 * Singly linked lists in the order their elements joined: a head, a tail,
 * and a 'next' field in each element (the waiters of a channel). Macros,
 * as <sys/queue.h> has them, so that every list keeps its own element
 * type; 'head' and 'tail' are evaluated more than once, and must be plain
 * lvalues.
 */
#ifndef DLOCK_FIFO_H
#define DLOCK_FIFO_H

#include <stddef.h>

/* Appends 'e' at the tail. */
#define DLOCK__FIFO_APPEND(head, tail, e)                                      \
  do {                                                                         \
    if ((tail) != NULL)                                                        \
      (tail)->next = (e);                                                      \
    else                                                                       \
      (head) = (e);                                                            \
    (tail) = (e);                                                              \
  } while (0)

/* Unlinks 'e', an element of 'type', when it is on the list; its own
 * 'next' is left as it is. */
#define DLOCK__FIFO_REMOVE(type, head, tail, e)                                \
  do {                                                                         \
    type *fifo_prev_ = NULL, *fifo_at_ = (head);                               \
    while (fifo_at_ != NULL && fifo_at_ != (e)) {                              \
      fifo_prev_ = fifo_at_;                                                   \
      fifo_at_ = fifo_at_->next;                                               \
    }                                                                          \
    if (fifo_at_ != NULL && fifo_prev_ != NULL)                                \
      fifo_prev_->next = fifo_at_->next;                                       \
    else if (fifo_at_ != NULL)                                                 \
      (head) = fifo_at_->next;                                                 \
    if (fifo_at_ != NULL && (tail) == fifo_at_)                                \
      (tail) = fifo_prev_;                                                     \
  } while (0)

#endif
