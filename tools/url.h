/*
 * Redis URLs as the user sees them in messages. A URL may carry a password
 * ("redis://:secret@host"), and messages end up in logs and CI output, so
 * every URL dlock prints goes through url_masked() first.
 */
#ifndef DLOCK_TOOLS_URL_H
#define DLOCK_TOOLS_URL_H

/* The URL used when neither --url nor $DLOCK_URL says otherwise. */
#define DLOCK_DEFAULT_URL "redis://127.0.0.1:6379"

/*
 * Returns a new copy of 'url' with the password replaced by "***"
 * ("redis://user:***@host:6379"), or NULL when out of memory. Everything
 * between "://" and the last '@' is user information; when it holds no ':'
 * it is masked whole, since some clients read a lone user part as password.
 */
char *url_masked(const char *url);

/*
 * Returns a new copy of 'text' (a message, perhaps from the library) in
 * which 'url' and its password are masked as url_masked() does, or NULL
 * when out of memory. A password shorter than 4 bytes is masked only as
 * part of the whole URL, lest every "a" in the message turn into "***".
 */
char *url_scrub(const char *text, const char *url);

/*
 * Returns a new copy of 'text' with every occurrence of 'secret' replaced
 * by "***", or NULL when out of memory. A secret shorter than 4 bytes is
 * left alone, for the reason given at url_scrub().
 */
char *url_mask_secret(const char *text, const char *secret);

/*
 * The environment variables a password may come from, so that it need not
 * be on the command line (where ps shows it): DLOCK_PASSWORD, else
 * REDISCLI_AUTH as redis-cli reads it. Returns the password, or NULL when
 * neither is set and not empty.
 */
const char *url_env_password(void);

/*
 * Returns a new copy of 'url' that carries 'password' (%-encoded) when the
 * URL has none of its own ("redis://host" becomes "redis://:PW@host",
 * "redis://user@host" becomes "redis://user:PW@host"); a URL with a
 * password, or a NULL 'password', is copied as it is. NULL when out of
 * memory. A password written in the URL wins, as in redis-cli.
 */
char *url_with_password(const char *url, const char *password);

#endif
