/* ppdiffuse — the NCCL table emulated over MPI (pp-nccl-emulated.h). */
#include "pp-nccl-emulated.h"
#include "pp-data-plane-choice.h"
#include "pp-log.h"
#include "pp-protocol.h"

#include <string.h>

#define EMU_ID_MAGIC 0x554d454eu        /* "NEMU" read little-endian */
/* Communicators a root makes get tags PP_TAG_NCCL_EMULATED + 1 +
 * root * EMU_TAGS_PER_ROOT + serial % EMU_TAGS_PER_ROOT: a rank roots at
 * most two links, and 256 workers stay under MPI's smallest tag bound. */
#define EMU_TAGS_PER_ROOT 32
/* cudaErrorUnknown: an MPI error under event_query. */
#define EMU_CUDA_ERROR 999

typedef enum
{
  COMM_BOOT,                    /* init posted, in progress */
  COMM_READY,
  COMM_ABORTED,
  COMM_FINALIZING,
  COMM_FINALIZED,
} CommState;

struct _PpNcclComm
{
  gint n_ranks;
  gint rank;                    /* NCCL rank */
  gint root;                    /* world rank of NCCL rank 0 */
  guint32 serial;
  gint tag;
  gint *world;                  /* world rank of each NCCL rank */
  CommState state;
  gboolean launching;           /* group_end said in progress */
  int error;                    /* a failure seen while polling */
  /* The set-up exchange. */
  gint32 *boot;                 /* root: hellos; member: hello + table */
  MPI_Request *boot_reqs;
  gint n_boot;
  gboolean boot_answered;       /* root: the table went out */
};

struct _PpCudaStream
{
  GMutex lock;
  GArray *posted;               /* MPI_Request, not yet behind an event */
};

struct _PpCudaEvent
{
  GArray *reqs;                 /* MPI_Request */
};

typedef struct
{
  gboolean send;
  gpointer buf;
  gsize bytes;
  gint peer;
  PpNcclComm comm;
  PpCudaStream stream;
} GroupOp;

static MPI_Comm emu_world = MPI_COMM_NULL;
static gint emu_me = -1;
static guint emu_serial;
static PpNcclEmulatedCounts counts;
static GMutex counts_lock;

/* A group is per thread, as NCCL's is. */
static __thread GArray *group_ops;
static __thread gint group_depth;
static __thread gboolean group_failed;  /* a call in the group was refused */

void
pp_nccl_emulated_counts (PpNcclEmulatedCounts * out)
{
  g_mutex_lock (&counts_lock);
  *out = counts;
  g_mutex_unlock (&counts_lock);
}

static void
count (guint * counter)
{
  g_mutex_lock (&counts_lock);
  (*counter)++;
  g_mutex_unlock (&counts_lock);
}

static gchar *
describe (PpNcclComm comm)
{
  GString *s = g_string_new (NULL);

  g_string_append_printf (s, "emulated NCCL communicator %d.%u (tag %d, "
      "ranks ", comm->root, comm->serial, comm->tag);
  for (gint i = 0; i < comm->n_ranks; i++) {
    if (comm->world[i] < 0)
      g_string_append (s, i ? ",?" : "?");
    else
      g_string_append_printf (s, "%s%d", i ? "," : "", comm->world[i]);
  }
  g_string_append_c (s, ')');
  return g_string_free (s, FALSE);
}

/* ---- ids and set-up ----------------------------------------------------- */

static int
emu_get_unique_id (PpNcclUniqueId * id)
{
  guint32 words[3] = { EMU_ID_MAGIC, (guint32) emu_me,
    g_atomic_int_add (&emu_serial, 1)
  };

  memset (id, 0, sizeof *id);
  memcpy (id->internal, words, sizeof words);
  return PP_NCCL_SUCCESS;
}

static int
emu_comm_init_rank_config (PpNcclComm * out, int n_ranks,
    const PpNcclUniqueId * id, int rank)
{
  guint32 words[3];
  PpNcclComm comm;

  memcpy (words, id->internal, sizeof words);
  *out = NULL;
  if (emu_world == MPI_COMM_NULL || words[0] != EMU_ID_MAGIC || n_ranks < 1
      || rank < 0 || rank >= n_ranks)
    return PP_NCCL_INVALID_ARGUMENT;
  comm = g_new0 (struct _PpNcclComm, 1);
  comm->n_ranks = n_ranks;
  comm->rank = rank;
  comm->root = (gint) words[1];
  comm->serial = words[2];
  comm->tag = PP_TAG_NCCL_EMULATED + 1 + comm->root * EMU_TAGS_PER_ROOT
      + (gint) (comm->serial % EMU_TAGS_PER_ROOT);
  comm->world = g_new (gint, n_ranks);
  for (gint i = 0; i < n_ranks; i++)
    comm->world[i] = -1;
  comm->world[rank] = emu_me;
  comm->state = COMM_BOOT;
  /* Root: one hello (serial, NCCL rank, world rank) per member, then the
   * table (serial, world ranks) to each.  Member: its hello, and the
   * table back. */
  comm->boot = g_new0 (gint32, 3 * n_ranks + 1 + n_ranks);
  comm->boot_reqs = g_new (MPI_Request, n_ranks + 1);
  if (rank == 0) {
    for (gint i = 1; i < n_ranks; i++)
      MPI_Irecv (comm->boot + 3 * i, 3, MPI_INT, MPI_ANY_SOURCE,
          PP_TAG_NCCL_EMULATED_BOOT, emu_world, &comm->boot_reqs[i - 1]);
    comm->n_boot = n_ranks - 1;
  } else {
    gint32 *hello = comm->boot;

    hello[0] = (gint32) comm->serial;
    hello[1] = rank;
    hello[2] = emu_me;
    MPI_Isend (hello, 3, MPI_INT, comm->root, PP_TAG_NCCL_EMULATED_BOOT,
        emu_world, &comm->boot_reqs[0]);
    MPI_Irecv (comm->boot + 3, 1 + n_ranks, MPI_INT, comm->root,
        PP_TAG_NCCL_EMULATED_BOOT, emu_world, &comm->boot_reqs[1]);
    comm->n_boot = 2;
  }
  *out = comm;
  return PP_NCCL_IN_PROGRESS;
}

static void
ready (PpNcclComm comm)
{
  g_autofree gchar *what = describe (comm);

  comm->state = COMM_READY;
  count (&counts.inits);
  PP_INFO ("%s ready on rank %d", what, emu_me);
}

/* Advances the set-up; the state it is in. */
static int
boot_poll (PpNcclComm comm)
{
  int flag = 0;

  if (comm->n_boot > 0 && MPI_Testall (comm->n_boot, comm->boot_reqs, &flag,
          MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    return PP_NCCL_SYSTEM_ERROR;
  if (comm->n_boot > 0 && !flag)
    return PP_NCCL_IN_PROGRESS;
  if (comm->rank != 0) {
    const gint32 *table = comm->boot + 3;

    if (table[0] != (gint32) comm->serial)
      return PP_NCCL_INVALID_USAGE;
    for (gint i = 0; i < comm->n_ranks; i++)
      comm->world[i] = table[1 + i];
    ready (comm);
    return PP_NCCL_SUCCESS;
  }
  if (!comm->boot_answered) {
    gint32 *table = comm->boot + 3 * comm->n_ranks;

    for (gint i = 1; i < comm->n_ranks; i++) {
      const gint32 *hello = comm->boot + 3 * i;

      if (hello[0] != (gint32) comm->serial || hello[1] < 1
          || hello[1] >= comm->n_ranks)
        return PP_NCCL_INVALID_USAGE;
      comm->world[hello[1]] = hello[2];
    }
    table[0] = (gint32) comm->serial;
    for (gint i = 0; i < comm->n_ranks; i++)
      table[1 + i] = comm->world[i];
    for (gint i = 1; i < comm->n_ranks; i++)
      MPI_Isend (table, 1 + comm->n_ranks, MPI_INT, comm->world[i],
          PP_TAG_NCCL_EMULATED_BOOT, emu_world, &comm->boot_reqs[i - 1]);
    comm->boot_answered = TRUE;
    return PP_NCCL_IN_PROGRESS;
  }
  ready (comm);
  return PP_NCCL_SUCCESS;
}

/* ---- groups ------------------------------------------------------------ */

static int
emu_group_start (void)
{
  if (group_ops == NULL)
    group_ops = g_array_new (FALSE, FALSE, sizeof (GroupOp));
  group_depth++;
  return PP_NCCL_SUCCESS;
}

static gsize
type_size (PpNcclDataType type)
{
  return type == PP_NCCL_FLOAT32 ? 4 : 1;
}

static int
note_op (gboolean send, gpointer buf, gsize count_, PpNcclDataType type,
    int peer, PpNcclComm comm, PpCudaStream stream)
{
  GroupOp op = { send, buf, count_ * type_size (type), peer, comm, stream };

  if (group_depth == 0)
    return PP_NCCL_INVALID_USAGE;       /* the plane always groups */
  if (comm == NULL || comm->state != COMM_READY || peer < 0
      || peer >= comm->n_ranks || peer == comm->rank || stream == NULL
      || op.bytes > G_MAXINT) {
    group_failed = TRUE;
    return PP_NCCL_INVALID_ARGUMENT;
  }
  g_array_append_val (group_ops, op);
  return PP_NCCL_SUCCESS;
}

static int
emu_send (const void *buf, gsize count_, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  return note_op (TRUE, (gpointer) buf, count_, type, peer, comm, stream);
}

static int
emu_recv (void *buf, gsize count_, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  return note_op (FALSE, buf, count_, type, peer, comm, stream);
}

static int
emu_group_end (void)
{
  int rc = PP_NCCL_SUCCESS;

  if (group_depth == 0)
    return PP_NCCL_INVALID_USAGE;
  if (--group_depth > 0)
    return PP_NCCL_SUCCESS;
  if (group_failed) {
    /* NCCL posts nothing of a group with a refused call. */
    group_failed = FALSE;
    g_array_set_size (group_ops, 0);
    return PP_NCCL_INVALID_ARGUMENT;
  }
  for (guint i = 0; i < group_ops->len; i++) {
    GroupOp *op = &g_array_index (group_ops, GroupOp, i);
    MPI_Request req;
    int mrc;

    if (op->send)
      mrc = MPI_Isend (op->buf, (int) op->bytes, MPI_BYTE,
          op->comm->world[op->peer], op->comm->tag, emu_world, &req);
    else
      mrc = MPI_Irecv (op->buf, (int) op->bytes, MPI_BYTE,
          op->comm->world[op->peer], op->comm->tag, emu_world, &req);
    if (mrc != MPI_SUCCESS) {
      rc = PP_NCCL_SYSTEM_ERROR;
      break;
    }
    g_mutex_lock (&op->stream->lock);
    g_array_append_val (op->stream->posted, req);
    g_mutex_unlock (&op->stream->lock);
    /* A non-blocking launch: in progress until polled. */
    op->comm->launching = TRUE;
    rc = PP_NCCL_IN_PROGRESS;
  }
  g_array_set_size (group_ops, 0);
  return rc;
}

static int
emu_comm_get_async_error (PpNcclComm comm, int *async_error)
{
  switch (comm->state) {
    case COMM_BOOT:
      *async_error = boot_poll (comm);
      if (*async_error != PP_NCCL_SUCCESS
          && *async_error != PP_NCCL_IN_PROGRESS)
        comm->error = *async_error;
      break;
    case COMM_READY:
      comm->launching = FALSE;
      *async_error = comm->error;
      break;
    case COMM_FINALIZING:{
      g_autofree gchar *what = describe (comm);

      comm->state = COMM_FINALIZED;
      count (&counts.finalizes);
      PP_INFO ("%s finalized on rank %d", what, emu_me);
      *async_error = PP_NCCL_SUCCESS;
      break;
    }
    default:
      *async_error = comm->error;
      break;
  }
  return PP_NCCL_SUCCESS;
}

static int
emu_comm_abort (PpNcclComm comm)
{
  g_autofree gchar *what = describe (comm);

  /* Posted requests are left to MPI, as the plane leaves their buffers:
   * the process is on its fault path. */
  comm->state = COMM_ABORTED;
  count (&counts.aborts);
  PP_INFO ("%s aborted on rank %d", what, emu_me);
  return PP_NCCL_SUCCESS;
}

static int
emu_comm_finalize (PpNcclComm comm)
{
  if (comm->state != COMM_READY)
    return PP_NCCL_INVALID_USAGE;
  comm->state = COMM_FINALIZING;
  return PP_NCCL_IN_PROGRESS;
}

static int
emu_comm_destroy (PpNcclComm comm)
{
  g_autofree gchar *what = describe (comm);

  if (comm->state != COMM_FINALIZED)
    return PP_NCCL_INVALID_USAGE;
  count (&counts.destroys);
  PP_INFO ("%s destroyed on rank %d", what, emu_me);
  /* An aborted communicator's set-up buffers may still be MPI's: only a
   * finalized one is freed. */
  g_free (comm->boot);
  g_free (comm->boot_reqs);
  g_free (comm->world);
  g_free (comm);
  return PP_NCCL_SUCCESS;
}

static const gchar *
emu_error_string (int result)
{
  switch (result) {
    case PP_NCCL_SYSTEM_ERROR:
      return "an MPI call of the emulated NCCL failed";
    case PP_NCCL_INVALID_USAGE:
      return "the emulated NCCL's set-up messages disagree";
    case PP_NCCL_INVALID_ARGUMENT:
      return "invalid argument to the emulated NCCL";
    default:
      return "emulated NCCL";
  }
}

/* ---- streams and events ------------------------------------------------ */

static int
emu_stream_create (PpCudaStream * stream)
{
  PpCudaStream s = g_new0 (struct _PpCudaStream, 1);

  g_mutex_init (&s->lock);
  s->posted = g_array_new (FALSE, FALSE, sizeof (MPI_Request));
  *stream = s;
  return PP_CUDA_SUCCESS;
}

static int
emu_stream_destroy (PpCudaStream stream)
{
  /* Requests still posted (a fault path) keep their array. */
  if (stream->posted->len == 0) {
    g_array_unref (stream->posted);
    g_mutex_clear (&stream->lock);
    g_free (stream);
  }
  return PP_CUDA_SUCCESS;
}

static int
emu_event_create (PpCudaEvent * event)
{
  PpCudaEvent e = g_new0 (struct _PpCudaEvent, 1);

  e->reqs = g_array_new (FALSE, FALSE, sizeof (MPI_Request));
  *event = e;
  return PP_CUDA_SUCCESS;
}

static int
emu_event_destroy (PpCudaEvent event)
{
  /* Pending requests (an aborted transfer) are left to MPI. */
  if (event->reqs->len == 0) {
    g_array_unref (event->reqs);
    g_free (event);
  }
  return PP_CUDA_SUCCESS;
}

static int
emu_event_record (PpCudaEvent event, PpCudaStream stream)
{
  if (stream == NULL)
    return EMU_CUDA_ERROR;
  g_mutex_lock (&stream->lock);
  g_array_append_vals (event->reqs, stream->posted->data,
      stream->posted->len);
  g_array_set_size (stream->posted, 0);
  g_mutex_unlock (&stream->lock);
  return PP_CUDA_SUCCESS;
}

static int
emu_event_query (PpCudaEvent event)
{
  int flag = 0;

  if (event->reqs->len == 0)
    return PP_CUDA_SUCCESS;
  if (MPI_Testall ((int) event->reqs->len, (MPI_Request *) event->reqs->data,
          &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    return EMU_CUDA_ERROR;
  if (!flag)
    return PP_CUDA_NOT_READY;
  g_array_set_size (event->reqs, 0);
  return PP_CUDA_SUCCESS;
}

static const gchar *
emu_cuda_error_name (int error)
{
  switch (error) {
    case PP_CUDA_SUCCESS:
      return "cudaSuccess";
    case PP_CUDA_NOT_READY:
      return "cudaErrorNotReady";
    case EMU_CUDA_ERROR:
      return "cudaErrorUnknown (an MPI request of the emulated NCCL failed)";
    default:
      return "cudaError (emulated)";
  }
}

static const PpNcclApi emulated_api = {
  .get_unique_id = emu_get_unique_id,
  .comm_init_rank_config = emu_comm_init_rank_config,
  .group_start = emu_group_start,
  .group_end = emu_group_end,
  .send = emu_send,
  .recv = emu_recv,
  .comm_get_async_error = emu_comm_get_async_error,
  .comm_abort = emu_comm_abort,
  .comm_finalize = emu_comm_finalize,
  .comm_destroy = emu_comm_destroy,
  .error_string = emu_error_string,
  .event_create = emu_event_create,
  .event_destroy = emu_event_destroy,
  .event_record = emu_event_record,
  .event_query = emu_event_query,
  .cuda_error_name = emu_cuda_error_name,
  .stream_create = emu_stream_create,
  .stream_destroy = emu_stream_destroy,
};

const PpNcclApi *
pp_nccl_emulated_api (MPI_Comm world)
{
  static GMutex lock;

  /* The mesh of the moment: a process runs one mesh at a time (an
   * element started again gets a new world). */
  g_mutex_lock (&lock);
  emu_world = world;
  MPI_Comm_rank (world, &emu_me);
  g_mutex_unlock (&lock);
  return &emulated_api;
}

/* At load: the mesh finds the table through the data plane choice
 * (pp_data_plane_api), which never names this file. */
__attribute__ ((constructor))
static void
install_emulation (void)
{
  pp_data_plane_set_emulation (pp_nccl_emulated_api);
}
