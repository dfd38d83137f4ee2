/* SPDX-License-Identifier: MIT */
#include "core/handoff.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

tfa_kept_fd_t tfa_handoff_user_dir = TFA_KEPT_FD_NONE;
tfa_kept_fd_t tfa_handoff_profile = TFA_KEPT_FD_NONE;

/* What a TFALLOC_HANDOFF entry's letter names. */
static tfa_kept_fd_t *
kept_of(char what)
{
	switch (what) {
	case 'u':
		return &tfa_handoff_user_dir;
	case 'l':
		return tfa_log_kept_path_fd();
	case 'p':
		return &tfa_handoff_profile;
	default:
		return NULL;
	}
}

static const char kinds[] = { 'u', 'l', 'p' };

void
tfa_handoff_prepare_user_dir(const char *outdir, uid_t uid)
{
	char dir[4096 + 16];
	struct stat st;
	int saved_errno = errno;

	if (stat(outdir, &st) != 0 || !S_ISDIR(st.st_mode))
		goto out;
	/* Theirs to write already: their own, or open to all (/tmp). */
	if ((st.st_mode & (S_IWOTH | S_IXOTH)) == (S_IWOTH | S_IXOTH)
	    || (st.st_uid == uid && (st.st_mode & (S_IWUSR | S_IXUSR)) == (S_IWUSR | S_IXUSR)))
		goto out;
	if (tfa_snprintf(dir, sizeof(dir), "%s/uid-%u", outdir, (unsigned)uid) >= sizeof(dir))
		goto out;
	/* Not privileged: lchown fails, and the directory goes again. */
	if (mkdir(dir, 0700) == 0 && lchown(dir, uid, (gid_t)-1) != 0) {
		(void)rmdir(dir);
		goto out;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		goto out;
	/* One made before: only if it is uid's (a directory of that name may be anyone's). */
	if (fstat(fd, &st) != 0 || st.st_uid != uid) {
		close(fd);
		goto out;
	}
	tfa_kept_fd_take(&tfa_handoff_user_dir, fd);
out:
	errno = saved_errno;
}

static void
set_cloexec(const tfa_kept_fd_t *k, bool on)
{
	(void)fcntl(k->fd, F_SETFD, on ? FD_CLOEXEC : 0);
}

size_t
tfa_handoff_begin(char *buf, size_t size)
{
	int saved_errno = errno;
	size_t n = tfa_snprintf(buf, size, "%s=", TFA_HANDOFF_VAR);
	bool any = false;

	for (size_t i = 0; i < sizeof(kinds); i++) {
		tfa_kept_fd_t *k = kept_of(kinds[i]);
		if (!tfa_kept_fd_ours(k))
			continue;
		n += tfa_snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, "%s%c:%d:%llu:%llu",
				  any ? "," : "", kinds[i], k->fd, (unsigned long long)k->dev,
				  (unsigned long long)k->ino);
		any = true;
	}
	if (!any || n >= size) {
		if (size > 0)
			buf[0] = '\0';
		errno = saved_errno;
		return 0;
	}
	for (size_t i = 0; i < sizeof(kinds); i++) {
		tfa_kept_fd_t *k = kept_of(kinds[i]);
		if (tfa_kept_fd_ours(k))
			set_cloexec(k, false);
	}
	errno = saved_errno;
	return n;
}

size_t
tfa_handoff_fds(int *fds, size_t max)
{
	int saved_errno = errno;
	size_t n = 0;

	for (size_t i = 0; i < sizeof(kinds) && n < max; i++) {
		tfa_kept_fd_t *k = kept_of(kinds[i]);
		if (!tfa_kept_fd_ours(k))
			continue;
		size_t at = n++;
		/* Insertion: three at most. */
		while (at > 0 && fds[at - 1] > k->fd) {
			fds[at] = fds[at - 1];
			at--;
		}
		fds[at] = k->fd;
	}
	errno = saved_errno;
	return n;
}

void
tfa_handoff_end(void)
{
	int saved_errno = errno;

	for (size_t i = 0; i < sizeof(kinds); i++) {
		tfa_kept_fd_t *k = kept_of(kinds[i]);
		if (tfa_kept_fd_ours(k))
			set_cloexec(k, true);
	}
	errno = saved_errno;
}

/* A decimal number at *s, up to a ':' or ',' or the end; false when there is none. */
static bool
parse_number(const char **s, unsigned long long *v)
{
	const char *p = *s;
	unsigned long long n = 0;

	if (*p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > (~0ULL - 9) / 10)
			return false;
		n = n * 10 + (unsigned long long)(*p - '0');
	}
	*s = p;
	*v = n;
	return true;
}

void
tfa_handoff_receive(const char *value)
{
	int saved_errno = errno;
	const char *p = value;

	while (p != NULL && *p != '\0') {
		char what = *p;
		unsigned long long fd, dev, ino;
		struct stat st;
		tfa_kept_fd_t *k = kept_of(what);
		if (p[1] != ':')
			break;
		p += 2;
		if (!parse_number(&p, &fd) || *p++ != ':' || !parse_number(&p, &dev) || *p++ != ':'
		    || !parse_number(&p, &ino) || (*p != ',' && *p != '\0'))
			break;
		if (*p == ',')
			p++;
		if (k == NULL || fd > 1u << 20 || k->fd >= 0)
			continue;
		/* Only the file it names: the number may be another's now. */
		if (fstat((int)fd, &st) != 0 || (unsigned long long)st.st_dev != dev
		    || (unsigned long long)st.st_ino != ino)
			continue;
		if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0)
			continue;
		*k = (tfa_kept_fd_t){ .fd = (int)fd, .dev = st.st_dev, .ino = st.st_ino };
	}
	errno = saved_errno;
}
