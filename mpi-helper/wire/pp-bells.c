/* ppdiffuse — the mesh's doorbells (pp-bells.h): futex words in a POSIX
 * shared memory object. */
#include "pp-bells.h"
#include "pp-error.h"
#include "pp-lanes.h"
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
/* The lanes (pp-lanes.h), when the object has them, start on a page. */
#define LANES_ALIGN 4096

struct _PpBells
{
  gchar *name;
  guint n_ranks;
  gsize bytes;
  guint32 *words;
  gboolean unlinked;
  PpLanes *lanes;
};

/* An object of only bells has this size exactly; with lanes, they start
 * at lanes_offset and run to its end (pp_lanes_map checks that they fill
 * it). */
static gsize
bells_bytes (guint n_ranks)
{
  return (gsize) n_ranks * BELL_STRIDE * sizeof (guint32);
}

static gsize
lanes_offset (guint n_ranks)
{
  return (bells_bytes (n_ranks) + LANES_ALIGN - 1) / LANES_ALIGN
      * LANES_ALIGN;
}

/* Rank 0: room for lanes of @slot_bytes slots in the new object @fd, taken
 * from the host's shared memory now (a tmpfs that runs out later would
 * kill the first process to touch a missing page with SIGBUS).  The size
 * of the object, or 0 with a warning: it then keeps only the bells. */
static gsize
reserve_lanes (int fd, const gchar * name, guint n_ranks, gsize slot_bytes)
{
  const gsize total = lanes_offset (n_ranks)
      + pp_lanes_bytes (n_ranks, slot_bytes);
  int rc;

  if (ftruncate (fd, (off_t) total) != 0)
    rc = errno;
  else
    rc = posix_fallocate (fd, 0, (off_t) total);
  if (rc == 0)
    return total;
  PP_WARN ("no chunk lanes for the ranks on this host: shared memory %s "
      "has no room for %" G_GSIZE_FORMAT " KiB (%s); their chunks travel "
      "over MPI", name, total / 1024, g_strerror (rc));
  return 0;
}

/* The size of the object @fd that a worker opens for @n_ranks ranks: the
 * bells alone, or more with lanes after them; 0 (with @error) for one
 * made for another number of ranks. */
static gsize
opened_size (int fd, const gchar * name, guint n_ranks, GError ** error)
{
  struct stat st = { 0 };

  if (fstat (fd, &st) == 0 && ((gsize) st.st_size == bells_bytes (n_ranks)
          || (gsize) st.st_size > lanes_offset (n_ranks)))
    return (gsize) st.st_size;
  /* A smaller object than the ranks need would fault at the first ring
   * past its end. */
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: %"
      G_GINT64_FORMAT " bytes, %" G_GSIZE_FORMAT " needed for %u ranks",
      name, (gint64) st.st_size, bells_bytes (n_ranks), n_ranks);
  return 0;
}

/* Rank 0: sizes the new object @fd, with lanes of @lane_slot_bytes slots
 * after the bells when not 0 and the host has room; its size, or 0 with
 * @error. */
static gsize
sized_new (int fd, const gchar * name, guint n_ranks, gsize lane_slot_bytes,
    GError ** error)
{
  const gsize with_lanes = lane_slot_bytes > 0
      ? reserve_lanes (fd, name, n_ranks, lane_slot_bytes) : 0;

  if (with_lanes != 0)
    return with_lanes;
  if (ftruncate (fd, (off_t) bells_bytes (n_ranks)) == 0)
    return bells_bytes (n_ranks);
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: "
      "sizing it: %s", name, g_strerror (errno));
  return 0;
}

/* @lane_slot_bytes (rank 0): lanes of that slot size after the bells when
 * not 0 and the host has room. */
static PpBells *
map_bells (const gchar * name, guint n_ranks, gboolean create,
    gsize lane_slot_bytes, GError ** error)
{
  const int fd = shm_open (name, create ? O_RDWR | O_CREAT | O_EXCL
      : O_RDWR, 0600);
  g_autoptr (GError) lanes_error = NULL;
  gsize bytes;
  PpLanes *lanes = NULL;
  PpBells *bells;
  void *words;

  if (fd < 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "shared memory %s: %s",
        name, g_strerror (errno));
    return NULL;
  }
  bytes = create ? sized_new (fd, name, n_ranks, lane_slot_bytes, error)
      : opened_size (fd, name, n_ranks, error);
  if (bytes == 0) {
    close (fd);
    if (create)
      shm_unlink (name);
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
  /* The lanes after the bells: formatted by rank 0, checked by the
   * others. */
  if (bytes > bells_bytes (n_ranks)) {
    guint8 *region = (guint8 *) words + lanes_offset (n_ranks);

    if (create)
      pp_lanes_format (region, n_ranks, lane_slot_bytes);
    lanes = pp_lanes_map (region, bytes - lanes_offset (n_ranks), n_ranks,
        &lanes_error);
    if (lanes == NULL) {
      g_propagate_prefixed_error (error, g_steal_pointer (&lanes_error),
          "shared memory %s: ", name);
      munmap (words, bytes);
      if (create)
        shm_unlink (name);
      return NULL;
    }
  }
  bells = g_new0 (PpBells, 1);
  bells->name = g_strdup (name);
  bells->n_ranks = n_ranks;
  bells->bytes = bytes;
  bells->words = words;
  bells->unlinked = !create;
  bells->lanes = lanes;
  return bells;
}

PpBells *
pp_bells_create (guint n_ranks, gsize lane_slot_bytes, gchar ** name,
    GError ** error)
{
  static gint serial;
  g_autofree gchar *candidate = g_strdup_printf ("/ppdiffuse-bells-%d-%d",
      (gint) getpid (), g_atomic_int_add (&serial, 1));
  PpBells *bells = map_bells (candidate, n_ranks, TRUE, lane_slot_bytes,
      error);

  if (bells != NULL)
    *name = g_steal_pointer (&candidate);
  return bells;
}

PpBells *
pp_bells_open (const gchar * name, guint n_ranks, GError ** error)
{
  return map_bells (name, n_ranks, FALSE, 0, error);
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
  pp_lanes_free (bells->lanes);
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

PpLanes *
pp_bells_lanes (PpBells * bells)
{
  return bells != NULL ? bells->lanes : NULL;
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
