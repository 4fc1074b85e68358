/* ppdiffuse — the mesh's doorbells (pp-bells.h): futex words in a POSIX
 * shared memory object. */
#include "pp-bells.h"
#include "pp-error.h"
#include "pp-log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* One bell a cache line: a ring does not disturb the other ranks' words. */
#define BELL_STRIDE (64 / sizeof (guint32))

struct _PpBells
{
  gchar *name;
  guint n_ranks;
  gsize bytes;
  guint32 *words;
  gboolean unlinked;
};

static PpBells *
map_bells (const gchar * name, guint n_ranks, gboolean create,
    GError ** error)
{
  const gsize bytes = (gsize) n_ranks * BELL_STRIDE * sizeof (guint32);
  const int fd = shm_open (name, create ? O_RDWR | O_CREAT | O_EXCL
      : O_RDWR, 0600);
  struct stat st = { 0 };
  PpBells *bells;
  void *words;

  if (fd < 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: %s",
        name, g_strerror (errno));
    return NULL;
  }
  if (create && ftruncate (fd, (off_t) bytes) != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: "
        "sizing it: %s", name, g_strerror (errno));
    close (fd);
    shm_unlink (name);
    return NULL;
  }
  /* A smaller object than the ranks need would fault at the first ring
   * past its end. */
  if (!create && (fstat (fd, &st) != 0 || st.st_size < (off_t) bytes)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: %"
        G_GINT64_FORMAT " bytes, %" G_GSIZE_FORMAT " needed for %u ranks",
        name, (gint64) st.st_size, bytes, n_ranks);
    close (fd);
    return NULL;
  }
  words = mmap (NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close (fd);
  if (words == MAP_FAILED) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: "
        "mapping it: %s", name, g_strerror (errno));
    if (create)
      shm_unlink (name);
    return NULL;
  }
  bells = g_new0 (PpBells, 1);
  bells->name = g_strdup (name);
  bells->n_ranks = n_ranks;
  bells->bytes = bytes;
  bells->words = words;
  bells->unlinked = !create;
  return bells;
}

PpBells *
pp_bells_create (guint n_ranks, gchar ** name, GError ** error)
{
  static gint serial;
  g_autofree gchar *candidate = g_strdup_printf ("/ppdiffuse-bells-%d-%d",
      (gint) getpid (), g_atomic_int_add (&serial, 1));
  PpBells *bells = map_bells (candidate, n_ranks, TRUE, error);

  if (bells != NULL)
    *name = g_steal_pointer (&candidate);
  return bells;
}

PpBells *
pp_bells_open (const gchar * name, guint n_ranks, GError ** error)
{
  return map_bells (name, n_ranks, FALSE, error);
}

void
pp_bells_unlink (PpBells * bells)
{
  if (bells == NULL || bells->unlinked)
    return;
  shm_unlink (bells->name);
  bells->unlinked = TRUE;
}

void
pp_bells_free (PpBells * bells)
{
  if (bells == NULL)
    return;
  pp_bells_unlink (bells);
  munmap (bells->words, bells->bytes);
  g_free (bells->name);
  g_free (bells);
}

static int
delete_attr (MPI_Comm comm, int keyval, void *value, void *extra)
{
  pp_bells_free (value);
  return MPI_SUCCESS;
}

static int
bells_keyval (void)
{
  static gsize once;
  static int keyval = MPI_KEYVAL_INVALID;

  if (g_once_init_enter (&once)) {
    MPI_Comm_create_keyval (MPI_COMM_NULL_COPY_FN, delete_attr, &keyval,
        NULL);
    g_once_init_leave (&once, 1);
  }
  return keyval;
}

void
pp_bells_attach (MPI_Comm comm, PpBells * bells)
{
  MPI_Comm_set_attr (comm, bells_keyval (), bells);
}

PpBells *
pp_bells_of (MPI_Comm comm)
{
  void *value = NULL;
  int found = 0;

  if (comm == MPI_COMM_NULL)
    return NULL;
  MPI_Comm_get_attr (comm, bells_keyval (), &value, &found);
  return found ? value : NULL;
}

static guint32 *
word_of (PpBells * bells, guint rank)
{
  g_return_val_if_fail (rank < bells->n_ranks, NULL);
  return bells->words + (gsize) rank * BELL_STRIDE;
}

guint32
pp_bells_read (PpBells * bells, guint rank)
{
  return __atomic_load_n (word_of (bells, rank), __ATOMIC_ACQUIRE);
}

void
pp_bells_ring (PpBells * bells, guint rank)
{
  guint32 *word = word_of (bells, rank);

  if (word == NULL)
    return;
  __atomic_add_fetch (word, 1, __ATOMIC_RELEASE);
  syscall (SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void
pp_bells_wait (PpBells * bells, guint rank, guint32 seen, gulong timeout_us)
{
  guint32 *word = word_of (bells, rank);
  struct timespec timeout = { (time_t) (timeout_us / G_USEC_PER_SEC),
    (long) (timeout_us % G_USEC_PER_SEC) * 1000
  };

  if (word == NULL) {
    g_usleep (timeout_us);
    return;
  }
  /* Returns at once when the word is no longer @seen; EINTR and the
   * timeout both mean "poll again". */
  syscall (SYS_futex, word, FUTEX_WAIT, seen, &timeout, NULL, 0);
}
