/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ACK of a PUSH written over the PUSH's own frame from a per-port template: the IPv4 header
 * copied with its checksum updated for the destination (RFC 1624), the UDP checksum started from
 * the template's constant part, the PHub header's fields left where the PUSH put them. DPDK-free.
 *
 * Every field the ACK takes from the PUSH (job, token, rank, chunk, iteration, elements,
 * segment, aux) is already in place at the same offset: the rewrite touches the opcode, flags,
 * header length, dtype, priority, payload length, reserved and csum bytes, and nothing is encoded
 * field by field. tests/unit/check_pbox_csum.c checks that the bytes equal those of the general
 * path (phub_wire_encode behind headers built and summed in full).
 */

#ifndef PBOX_ACK_H
#define PBOX_ACK_H

#include <stdint.h>
#include <string.h>

#include "net/phub_net_csum.h"
#include "wire/phub_wire.h"

enum {
	PBOX_ACK_ETH_LEN = 14,
	PBOX_ACK_IP_LEN = 20,
	PBOX_ACK_UDP_LEN = 8,
	/* The offset of the PHub header; a PUSH whose IPv4 header has options is not rewritten. */
	PBOX_ACK_HDR_OFF = PBOX_ACK_ETH_LEN + PBOX_ACK_IP_LEN + PBOX_ACK_UDP_LEN,
	PBOX_ACK_FRAME_LEN = PBOX_ACK_HDR_OFF + PHUB_WIRE_HDR_LEN,
};

/* What every ACK a port sends has in common. */
struct pbox_ack_tmpl {
	uint8_t src_mac[6];
	uint8_t ip[PBOX_ACK_IP_LEN];	/* the ACK's IPv4 header, destination 0, its checksum */
	/*
	 * Raw sum of the UDP checksum's constant part: the pseudo-header but its destination, the
	 * UDP length, the PHub header's first 8 bytes with flags 0 and its zero fields.
	 */
	uint32_t udp_sum;
};

static inline void
pbox_ack_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* The template of a port: its MAC and IPv4 address (host order). */
static inline void
pbox_ack_tmpl_init(struct pbox_ack_tmpl *t, const uint8_t mac[6], uint32_t ipv4)
{
	uint8_t pseudo[12] = { 0 }, head[8] = { 0 };
	uint16_t csum;

	memcpy(t->src_mac, mac, 6);
	memset(t->ip, 0, sizeof(t->ip));
	t->ip[0] = 0x45;			/* version 4, 5 words */
	pbox_ack_put16(t->ip + 2, PBOX_ACK_IP_LEN + PBOX_ACK_UDP_LEN + PHUB_WIRE_HDR_LEN);
	pbox_ack_put16(t->ip + 6, 0x4000);	/* don't fragment */
	t->ip[8] = 64;				/* TTL */
	t->ip[9] = 17;				/* UDP */
	pbox_ack_put16(t->ip + 12, (uint16_t)(ipv4 >> 16));
	pbox_ack_put16(t->ip + 14, (uint16_t)ipv4);
	csum = (uint16_t)~phub_net_raw_cksum_scalar(t->ip, sizeof(t->ip));
	memcpy(t->ip + 10, &csum, sizeof(csum));
	memcpy(pseudo, t->ip + 12, 4);
	pseudo[9] = 17;
	pbox_ack_put16(pseudo + 10, PBOX_ACK_UDP_LEN + PHUB_WIRE_HDR_LEN);
	/* The magic and version of every datagram the parser took, and the ACK's own bytes. */
	pbox_ack_put16(head, PHUB_WIRE_MAGIC);
	head[2] = PHUB_WIRE_VERSION;
	head[3] = PHUB_WIRE_OP_ACK;
	head[5] = PHUB_WIRE_HDR_LEN;
	head[6] = PHUB_WIRE_DTYPE_NONE;
	/* The pseudo-header's length and the UDP header's own: the same word twice. */
	t->udp_sum = (uint32_t)phub_net_raw_cksum_scalar(pseudo, sizeof(pseudo)) +
		phub_net_raw_cksum_scalar(pseudo + 10, 2) + phub_net_raw_cksum_scalar(head, sizeof(head));
}

/*
 * Turn frame, a received PUSH that the wire parser took (Ethernet, a 20-byte IPv4 header, UDP,
 * the PHub header; at least PBOX_ACK_FRAME_LEN bytes), into its ACK to the sender, with the
 * ACK's flags (no PHUB_WIRE_F_CSUM: its CRC is the general path's). Returns the ACK's length.
 */
static inline uint16_t
pbox_ack_rewrite(uint8_t *frame, const struct pbox_ack_tmpl *t, uint8_t flags)
{
	uint8_t *ip = frame + PBOX_ACK_ETH_LEN;
	uint8_t *udp = ip + PBOX_ACK_IP_LEN;
	uint8_t *h = udp + PBOX_ACK_UDP_LEN;
	uint8_t flag_bytes[2] = { flags, 0 };
	uint16_t sport, dport, csum, flag_word, ip_csum;
	uint32_t dst, sum;

	/*
	 * Everything the sums need is read before anything is written: a wide load over bytes just
	 * stored one by one waits for the stores (no store forwarding), which cost more than the
	 * whole sum. The fields the ACK keeps: job, rank, segment index and count (bytes 8 to
	 * 17), token, chunk, iteration, elements and aux (24 to 51).
	 */
	memcpy(&dst, ip + 12, sizeof(dst));	/* the PUSH's source address */
	memcpy(&sport, udp, sizeof(sport));
	memcpy(&dport, udp + 2, sizeof(dport));
	memcpy(&flag_word, flag_bytes, sizeof(flag_word));
	sum = t->udp_sum + (dst & 0xffff) + (dst >> 16) + sport + dport + flag_word +
		phub_net_raw_cksum_scalar(h + 8, 10) + phub_net_raw_cksum_scalar(h + 24, 28);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	csum = (uint16_t)~sum;
	/* 0 means "no checksum" in UDP over IPv4: send its other form. */
	if (csum == 0)
		csum = 0xffff;
	/* The template's IPv4 checksum, its destination 0 replaced (RFC 1624). */
	memcpy(&ip_csum, t->ip + 10, sizeof(ip_csum));
	ip_csum = phub_net_csum_update32(ip_csum, 0, dst);

	memmove(frame, frame + 6, 6);		/* to the PUSH's source */
	memcpy(frame + 6, t->src_mac, 6);
	memcpy(ip, t->ip, sizeof(t->ip));
	memcpy(ip + 16, &dst, sizeof(dst));
	memcpy(ip + 10, &ip_csum, sizeof(ip_csum));
	memcpy(udp, &dport, sizeof(dport));
	memcpy(udp + 2, &sport, sizeof(sport));
	pbox_ack_put16(udp + 4, PBOX_ACK_UDP_LEN + PHUB_WIRE_HDR_LEN);
	memcpy(udp + 6, &csum, sizeof(csum));
	h[3] = PHUB_WIRE_OP_ACK;
	h[4] = flags;
	h[5] = PHUB_WIRE_HDR_LEN;
	h[6] = PHUB_WIRE_DTYPE_NONE;
	h[7] = 0;				/* priority */
	memset(h + 18, 0, 6);			/* payload_len, reserved */
	memset(h + 52, 0, 4);			/* csum */
	return PBOX_ACK_FRAME_LEN;
}

/*
 * Who a frame from the PBox is for, as its headers carry it (memory order, as stored): the
 * fields that differ between the MODEL frames of one broadcast.
 */
struct pbox_frame_peer {
	uint8_t mac[6];
	uint32_t ipv4;		/* network order */
	uint16_t udp_port;	/* network order */
	uint16_t rank;		/* network order */
	uint64_t token;		/* network order */
	uint32_t aux;		/* network order: the rank's PUSH stamp a MODEL echoes (ACKV) */
};

/*
 * Turn frame (Ethernet, a 20-byte IPv4 header, UDP with a checksum, the PHub header), built for
 * from, into the same frame for to: the fields written, the IPv4 and UDP checksums updated
 * (RFC 1624) instead of the header built and summed again. The payload and everything else stay.
 */
static inline void
pbox_frame_retarget(uint8_t *frame, const struct pbox_frame_peer *from,
		const struct pbox_frame_peer *to)
{
	uint8_t *ip = frame + PBOX_ACK_ETH_LEN;
	uint8_t *udp = ip + PBOX_ACK_IP_LEN;
	uint8_t *h = udp + PBOX_ACK_UDP_LEN;
	uint16_t ip_csum, udp_csum;

	memcpy(&ip_csum, ip + 10, sizeof(ip_csum));
	memcpy(&udp_csum, udp + 6, sizeof(udp_csum));
	ip_csum = phub_net_csum_update32(ip_csum, from->ipv4, to->ipv4);
	/* The destination is in the UDP pseudo-header too. */
	udp_csum = phub_net_csum_update32(udp_csum, from->ipv4, to->ipv4);
	udp_csum = phub_net_csum_update16(udp_csum, from->udp_port, to->udp_port);
	udp_csum = phub_net_csum_update16(udp_csum, from->rank, to->rank);
	udp_csum = phub_net_csum_update32(udp_csum, (uint32_t)from->token, (uint32_t)to->token);
	udp_csum = phub_net_csum_update32(udp_csum, (uint32_t)(from->token >> 32),
			(uint32_t)(to->token >> 32));
	udp_csum = phub_net_csum_update32(udp_csum, from->aux, to->aux);
	/* 0 means "no checksum" in UDP over IPv4: send its other form. */
	if (udp_csum == 0)
		udp_csum = 0xffff;
	memcpy(frame, to->mac, sizeof(to->mac));
	memcpy(ip + 10, &ip_csum, sizeof(ip_csum));
	memcpy(ip + 16, &to->ipv4, sizeof(to->ipv4));
	memcpy(udp + 2, &to->udp_port, sizeof(to->udp_port));
	memcpy(udp + 6, &udp_csum, sizeof(udp_csum));
	memcpy(h + 12, &to->rank, sizeof(to->rank));
	memcpy(h + 24, &to->token, sizeof(to->token));
	memcpy(h + 48, &to->aux, sizeof(to->aux));
}

#endif /* PBOX_ACK_H */
