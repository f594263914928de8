/* SPDX-License-Identifier: BSD-3-Clause */
/* The ACKV body: its 16-byte entries validated, read and written (docs/protocol.md section 3). */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "phub_wire.h"
#include "wire_priv.h"

unsigned int
phub_wire_ackv_max_entries(unsigned int mtu)
{
	return (unsigned int)(phub_wire_max_payload(mtu) / PHUB_WIRE_ACKV_ENTRY_LEN);
}

enum phub_drop_reason
phub_wire_ackv_parse(const void *body, size_t len, unsigned int *count)
{
	const uint8_t *p = body;

	*count = 0;
	/* An ACKV of nothing, or of a partial entry, is a broken sender: entries are whole. */
	if (len == 0 || len % PHUB_WIRE_ACKV_ENTRY_LEN != 0)
		return PHUB_DROP_ACKV_LENGTH;
	for (size_t off = 0; off < len; off += PHUB_WIRE_ACKV_ENTRY_LEN) {
		uint16_t flags = wire_ld16(p + off + offsetof(struct phub_wire_ackv_entry_wire,
				flags));

		/* An ACK's flags only (LAST, REPLAY): more means something we cannot honour. */
		if ((flags & ~PHUB_WIRE_ACKV_ENTRY_F_ALL) != 0)
			return PHUB_DROP_ACKV_ENTRY;
	}
	*count = (unsigned int)(len / PHUB_WIRE_ACKV_ENTRY_LEN);
	return PHUB_DROP_OK;
}

void
phub_wire_ackv_get(const void *body, unsigned int i, struct phub_wire_ackv_entry *out)
{
	const uint8_t *p = (const uint8_t *)body + (size_t)i * PHUB_WIRE_ACKV_ENTRY_LEN;

	out->chunk_id = wire_ld32(p + offsetof(struct phub_wire_ackv_entry_wire, chunk_id));
	out->seg_index = wire_ld16(p + offsetof(struct phub_wire_ackv_entry_wire, seg_index));
	out->flags = wire_ld16(p + offsetof(struct phub_wire_ackv_entry_wire, flags));
	out->iteration = wire_ld32(p + offsetof(struct phub_wire_ackv_entry_wire, iteration));
	out->aux = wire_ld32(p + offsetof(struct phub_wire_ackv_entry_wire, aux));
}

void
phub_wire_ackv_put(void *body, const struct phub_wire_ackv_entry *e, unsigned int n)
{
	uint8_t *p = body;

	for (unsigned int i = 0; i < n; i++, p += PHUB_WIRE_ACKV_ENTRY_LEN) {
		wire_st32(p + offsetof(struct phub_wire_ackv_entry_wire, chunk_id), e[i].chunk_id);
		wire_st16(p + offsetof(struct phub_wire_ackv_entry_wire, seg_index), e[i].seg_index);
		wire_st16(p + offsetof(struct phub_wire_ackv_entry_wire, flags), e[i].flags);
		wire_st32(p + offsetof(struct phub_wire_ackv_entry_wire, iteration), e[i].iteration);
		wire_st32(p + offsetof(struct phub_wire_ackv_entry_wire, aux), e[i].aux);
	}
}
