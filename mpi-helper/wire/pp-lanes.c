/* ppdiffuse — chunk lanes in shared memory (pp-lanes.h).
 *
 * Layout of the region: a header (magic, geometry, open, one joined word
 * per rank) padded to a page, then one lane per rank r (r to r + 1 mod n):
 * a page with its two counters, each on its own cache line, then its
 * slots.  `written` counts the chunks the sender published, `consumed`
 * those the receiver released; slot i % PP_LANE_SLOTS holds chunk i.  Each
 * counter has one writer, which stores it with release order after the
 * slot's bytes; the other end loads it with acquire order. */
#include "pp-lanes.h"
#include "pp-error.h"
#include "pp-protocol.h"

#include <string.h>

#define LANES_MAGIC 0x4c505050u /* "PPPL" read as LE u32 */
#define PAGE 4096
#define LINE 64
/* A slot's own header, then the envelope head at SLOT_HEAD_OFFSET. */
#define SLOT_HEAD_OFFSET 256

typedef struct
{
  guint32 magic;
  guint32 n_ranks;
  guint32 n_slots;
  guint32 open;
  guint64 slot_bytes;
  guint32 joined[];
} Header;

typedef struct
{
  guint32 head_len;
  guint32 n_payloads;
  guint32 payloads_here;
  guint32 reserved;
  guint64 payload_len[PP_ENVELOPE_MAX_TENSORS];
} SlotHeader;

G_STATIC_ASSERT (sizeof (SlotHeader) <= SLOT_HEAD_OFFSET);
G_STATIC_ASSERT (SLOT_HEAD_OFFSET + PP_ENVELOPE_HEAD_MAX
    <= PP_LANE_SLOT_BYTES_MIN);
G_STATIC_ASSERT (PP_LANE_SLOT_BYTES_MIN % LINE == 0);

struct _PpLane
{
  guint64 *written;
  guint64 *consumed;
  guint8 *slots;
  gsize slot_bytes;
};

struct _PpLanes
{
  Header *header;
  guint n_ranks;
  gsize slot_bytes;
  PpLane *lanes;                /* one per sending rank */
};

static gsize
align_up (gsize n, gsize to)
{
  return (n + to - 1) / to * to;
}

static gsize
header_bytes (guint n_ranks)
{
  return align_up (sizeof (Header) + n_ranks * sizeof (guint32), PAGE);
}

static gsize
lane_bytes (gsize slot_bytes)
{
  return PAGE + align_up (PP_LANE_SLOTS * slot_bytes, PAGE);
}

gboolean
pp_lanes_slot_bytes_from_env (guint n_ranks, gsize * slot_bytes,
    GError ** error)
{
  const gchar *env = g_getenv (PP_LANE_SLOT_BYTES_ENV);
  const gsize share = PP_LANES_BUDGET_BYTES / MAX (n_ranks, 1)
      / PP_LANE_SLOTS / LINE * LINE;
  guint64 value = 0;

  if (env == NULL || *env == '\0') {
    *slot_bytes = MAX (MIN (PP_LANE_SLOT_BYTES_DEFAULT, share),
        PP_LANE_SLOT_BYTES_MIN);
    return TRUE;
  }
  if (!g_ascii_string_to_unsigned (env, 10, PP_LANE_SLOT_BYTES_MIN,
          PP_LANE_SLOT_BYTES_MAX, &value, NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: expected a "
        "number of bytes from %d (the largest chunk head) to %d",
        PP_LANE_SLOT_BYTES_ENV, env, PP_LANE_SLOT_BYTES_MIN,
        PP_LANE_SLOT_BYTES_MAX);
    return FALSE;
  }
  *slot_bytes = align_up (value, LINE);
  return TRUE;
}

gsize
pp_lanes_bytes (guint n_ranks, gsize slot_bytes)
{
  return header_bytes (n_ranks) + n_ranks * lane_bytes (slot_bytes);
}

void
pp_lanes_format (gpointer region, guint n_ranks, gsize slot_bytes)
{
  Header *h = region;

  h->n_ranks = n_ranks;
  h->n_slots = PP_LANE_SLOTS;
  h->slot_bytes = slot_bytes;
  h->joined[0] = 1;
  __atomic_store_n (&h->magic, LANES_MAGIC, __ATOMIC_RELEASE);
}

PpLanes *
pp_lanes_map (gpointer region, gsize bytes, guint n_ranks, GError ** error)
{
  Header *h = region;
  PpLanes *lanes;
  guint8 *lane;
  gsize slot_bytes;

  if (bytes < header_bytes (n_ranks)
      || __atomic_load_n (&h->magic, __ATOMIC_ACQUIRE) != LANES_MAGIC
      || h->n_ranks != n_ranks || h->n_slots != PP_LANE_SLOTS
      || h->slot_bytes < PP_LANE_SLOT_BYTES_MIN
      || h->slot_bytes > PP_LANE_SLOT_BYTES_MAX || h->slot_bytes % LINE != 0
      || bytes != pp_lanes_bytes (n_ranks, h->slot_bytes)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "chunk lanes: %"
        G_GSIZE_FORMAT " bytes that are not the lanes of %u ranks with %d "
        "slots each", bytes, n_ranks, PP_LANE_SLOTS);
    return NULL;
  }
  slot_bytes = h->slot_bytes;
  lanes = g_new0 (PpLanes, 1);
  lanes->header = h;
  lanes->n_ranks = n_ranks;
  lanes->slot_bytes = slot_bytes;
  lanes->lanes = g_new0 (PpLane, n_ranks);
  lane = (guint8 *) region + header_bytes (n_ranks);
  for (guint r = 0; r < n_ranks; r++, lane += lane_bytes (slot_bytes)) {
    lanes->lanes[r].written = (guint64 *) lane;
    lanes->lanes[r].consumed = (guint64 *) (lane + LINE);
    lanes->lanes[r].slots = lane + PAGE;
    lanes->lanes[r].slot_bytes = slot_bytes;
  }
  return lanes;
}

gsize
pp_lanes_slot_bytes (PpLanes * lanes)
{
  return lanes->slot_bytes;
}

void
pp_lanes_free (PpLanes * lanes)
{
  if (lanes == NULL)
    return;
  g_free (lanes->lanes);
  g_free (lanes);
}

void
pp_lanes_join (PpLanes * lanes, guint rank)
{
  g_return_if_fail (rank < lanes->n_ranks);
  __atomic_store_n (&lanes->header->joined[rank], 1, __ATOMIC_RELEASE);
}

void
pp_lanes_open (PpLanes * lanes)
{
  __atomic_store_n (&lanes->header->open, 1, __ATOMIC_RELEASE);
}

gboolean
pp_lanes_is_open (PpLanes * lanes)
{
  return __atomic_load_n (&lanes->header->open, __ATOMIC_ACQUIRE) != 0;
}

static gboolean
joined (PpLanes * lanes, guint rank)
{
  return __atomic_load_n (&lanes->header->joined[rank], __ATOMIC_ACQUIRE)
      != 0;
}

PpLane *
pp_lanes_between (PpLanes * lanes, guint from, guint to)
{
  if (!pp_lanes_is_open (lanes) || from >= lanes->n_ranks
      || to != (from + 1) % lanes->n_ranks || from == to
      || !joined (lanes, from) || !joined (lanes, to))
    return NULL;
  return &lanes->lanes[from];
}

guint
pp_lanes_count (PpLanes * lanes)
{
  guint n = 0;

  for (guint r = 0; r < lanes->n_ranks; r++)
    n += pp_lanes_between (lanes, r, (r + 1) % lanes->n_ranks) != NULL;
  return n;
}

static guint8 *
slot_at (PpLane * lane, guint64 index)
{
  return lane->slots + (index % PP_LANE_SLOTS) * lane->slot_bytes;
}

gboolean
pp_lane_writable (PpLane * lane)
{
  return *lane->written - __atomic_load_n (lane->consumed, __ATOMIC_ACQUIRE)
      < PP_LANE_SLOTS;
}

gboolean
pp_lane_fill (PpLane * lane, const guint8 * head, gsize head_len,
    const PpChunk * chunk, gboolean short_first)
{
  guint8 *slot = slot_at (lane, *lane->written);
  SlotHeader *sh = (SlotHeader *) slot;
  const guint n = chunk->tensors->len;
  gsize offset = align_up (SLOT_HEAD_OFFSET + head_len, LINE);

  /* The envelope's writer holds a head to PP_ENVELOPE_HEAD_MAX, which a
   * slot of the minimum size holds. */
  g_assert (head_len <= PP_ENVELOPE_HEAD_MAX);
  memcpy (slot + SLOT_HEAD_OFFSET, head, head_len);
  sh->head_len = (guint32) head_len;
  for (guint i = 0; i < n; i++)
    offset = align_up (offset + ((PpTensor *)
            g_ptr_array_index (chunk->tensors, i))->nbytes, LINE);
  sh->payloads_here = offset <= lane->slot_bytes;
  sh->n_payloads = sh->payloads_here ? n : 0;
  if (!sh->payloads_here)
    return FALSE;
  offset = align_up (SLOT_HEAD_OFFSET + head_len, LINE);
  for (guint i = 0; i < n; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    const gsize len = short_first && i == 0 ? t->nbytes / 2 : t->nbytes;

    memcpy (slot + offset, t->data, len);
    sh->payload_len[i] = len;
    offset = align_up (offset + len, LINE);
  }
  return TRUE;
}

void
pp_lane_publish (PpLane * lane)
{
  __atomic_store_n (lane->written, *lane->written + 1, __ATOMIC_RELEASE);
}

gboolean
pp_lane_readable (PpLane * lane)
{
  return __atomic_load_n (lane->written, __ATOMIC_ACQUIRE) > *lane->consumed;
}

gboolean
pp_lane_peek (PpLane * lane, PpLaneSlot * slot, GError ** error)
{
  guint8 *bytes = slot_at (lane, *lane->consumed);
  const SlotHeader *sh = (const SlotHeader *) bytes;
  gsize offset;

  memset (slot, 0, sizeof *slot);
  if (sh->head_len > PP_ENVELOPE_HEAD_MAX
      || sh->n_payloads > PP_ENVELOPE_MAX_TENSORS
      || (!sh->payloads_here && sh->n_payloads != 0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "chunk lane slot: "
        "head of %u bytes (at most %d) and %u payloads (at most %d)",
        sh->head_len, PP_ENVELOPE_HEAD_MAX, sh->n_payloads,
        PP_ENVELOPE_MAX_TENSORS);
    return FALSE;
  }
  slot->head = bytes + SLOT_HEAD_OFFSET;
  slot->head_len = sh->head_len;
  slot->payloads_here = sh->payloads_here != 0;
  slot->n_payloads = sh->n_payloads;
  offset = align_up (SLOT_HEAD_OFFSET + sh->head_len, LINE);
  for (guint i = 0; i < sh->n_payloads; i++) {
    if (sh->payload_len[i] > lane->slot_bytes - offset) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "chunk lane slot: "
          "payload %u of %" G_GUINT64_FORMAT " bytes runs past the slot's "
          "%" G_GSIZE_FORMAT, i, sh->payload_len[i], lane->slot_bytes);
      return FALSE;
    }
    slot->payload[i] = bytes + offset;
    slot->payload_len[i] = sh->payload_len[i];
    offset = align_up (offset + sh->payload_len[i], LINE);
  }
  return TRUE;
}

void
pp_lane_release (PpLane * lane)
{
  __atomic_store_n (lane->consumed, *lane->consumed + 1, __ATOMIC_RELEASE);
}
