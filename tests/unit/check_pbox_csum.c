/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The appliance's checksummed templates (ack.h): its ACK rewritten over a PUSH gives the general
 * path's bytes, a frame retargeted by incremental updates the full build's. lib/net's own sums
 * are checked in check_net.c.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_suite.h"
#include "test_rand.h"
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include "ack.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint8_t
next_byte(void)
{
	return (uint8_t)(phub_test_rand(&rng) >> 24);
}

static uint32_t
next_u32(void)
{
	return (uint32_t)next_byte() << 24 | (uint32_t)next_byte() << 16 |
		(uint32_t)next_byte() << 8 | next_byte();
}

/* A PUSH frame of random fields, as a worker sends it (full checksums). */
static size_t
push_frame(uint8_t *frame, size_t cap, struct phub_wire_msg *msg, uint8_t *payload)
{
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)(void *)frame;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
	uint16_t elems = (uint16_t)(16 * (1 + next_byte() % 8));
	int len;

	phub_wire_msg_init(msg, PHUB_WIRE_OP_PUSH);
	msg->job_id = next_u32();
	msg->session_token = (uint64_t)next_u32() << 32 | next_u32() | 1;
	msg->worker_rank = (uint16_t)next_u32();
	msg->seg_count = (uint16_t)(1 + next_u32() % 600);
	msg->seg_index = (uint16_t)(next_u32() % msg->seg_count);
	msg->flags = msg->seg_index + 1 == msg->seg_count ? PHUB_WIRE_F_LAST : 0;
	if (next_byte() & 1)
		msg->flags |= PHUB_WIRE_F_RETRANSMIT;
	if (next_byte() & 1) {
		msg->flags |= PHUB_WIRE_F_HYPER;
		msg->hyper_lr = 0.01f;
		msg->hyper_weight_decay = 0.0001f;
	}
	msg->priority = next_byte();
	msg->chunk_id = next_u32();
	msg->iteration = next_u32();
	msg->elem_count = elems;
	msg->elem_offset = next_u32() % (UINT32_MAX - elems);
	msg->aux = next_u32();
	msg->dtype = PHUB_DTYPE_FP32;
	for (size_t i = 0; i < elems * 4u; i++)
		payload[i] = next_byte();
	msg->payload = payload;
	msg->payload_len = (uint16_t)(elems * 4u);
	len = phub_wire_encode(udp + 1, cap - PBOX_ACK_HDR_OFF, msg);
	ck_assert_int_gt(len, 0);
	for (int i = 0; i < 6; i++) {
		eth->dst_addr.addr_bytes[i] = next_byte();
		eth->src_addr.addr_bytes[i] = next_byte();
	}
	eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->type_of_service = next_byte();
	ip->total_length = rte_cpu_to_be_16((uint16_t)(20 + 8 + len));
	ip->packet_id = (uint16_t)next_u32();
	ip->fragment_offset = 0;
	ip->time_to_live = next_byte();
	ip->next_proto_id = IPPROTO_UDP;
	ip->src_addr = next_u32();
	ip->dst_addr = next_u32();
	ip->hdr_checksum = 0;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	udp->src_port = (uint16_t)next_u32();
	udp->dst_port = (uint16_t)next_u32();
	udp->dgram_len = rte_cpu_to_be_16((uint16_t)(8 + len));
	udp->dgram_cksum = 0;
	udp->dgram_cksum = rte_ipv4_udptcp_cksum(ip, udp);
	return PBOX_ACK_HDR_OFF + (size_t)len;
}

/*
 * The ACK as the general path builds it (datapath.c before the template): the PUSH's fields
 * encoded in a fresh message, headers written and summed in full.
 */
static void
ack_reference(const uint8_t *push, const struct phub_wire_msg *in, const uint8_t mac[6],
		uint32_t ipv4, uint8_t *out)
{
	const struct rte_ether_hdr *peth = (const struct rte_ether_hdr *)(const void *)push;
	const struct rte_ipv4_hdr *pip = (const struct rte_ipv4_hdr *)(peth + 1);
	const struct rte_udp_hdr *pudp = (const struct rte_udp_hdr *)(pip + 1);
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)(void *)out;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
	struct phub_wire_msg ack;
	uint16_t csum;

	phub_wire_msg_init(&ack, PHUB_WIRE_OP_ACK);
	ack.job_id = in->job_id;
	ack.session_token = in->session_token;
	ack.worker_rank = in->worker_rank;
	ack.chunk_id = in->chunk_id;
	ack.iteration = in->iteration;
	ack.elem_offset = in->elem_offset;
	ack.elem_count = in->elem_count;
	ack.seg_index = in->seg_index;
	ack.seg_count = in->seg_count;
	ack.aux = in->aux;
	ack.flags = in->flags & PHUB_WIRE_F_LAST;
	ck_assert_int_eq(phub_wire_encode(udp + 1, PHUB_WIRE_HDR_LEN, &ack), PHUB_WIRE_HDR_LEN);
	memcpy(eth->dst_addr.addr_bytes, peth->src_addr.addr_bytes, 6);
	memcpy(eth->src_addr.addr_bytes, mac, 6);
	eth->ether_type = RTE_BE16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->type_of_service = 0;
	ip->total_length = rte_cpu_to_be_16(20 + 8 + PHUB_WIRE_HDR_LEN);
	ip->packet_id = 0;
	ip->fragment_offset = RTE_BE16(RTE_IPV4_HDR_DF_FLAG);
	ip->time_to_live = 64;
	ip->next_proto_id = IPPROTO_UDP;
	ip->src_addr = rte_cpu_to_be_32(ipv4);
	ip->dst_addr = pip->src_addr;
	ip->hdr_checksum = 0;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
	udp->src_port = pudp->dst_port;
	udp->dst_port = pudp->src_port;
	udp->dgram_len = rte_cpu_to_be_16(8 + PHUB_WIRE_HDR_LEN);
	udp->dgram_cksum = 0;
	csum = rte_ipv4_udptcp_cksum(ip, udp);
	udp->dgram_cksum = csum;
}

/* Random PUSHes: the rewritten ACK is byte for byte the general path's, and its sums hold. */
START_TEST(test_ack_rewrite_equals_general_path)
{
	static uint8_t frame[PBOX_ACK_HDR_OFF + 64 + 512 * 4], payload[512 * 4];
	uint8_t want[PBOX_ACK_FRAME_LEN], mac[6];
	struct pbox_ack_tmpl t;

	for (int round = 0; round < 20000; round++) {
		const struct rte_ipv4_hdr *ip =
			(const struct rte_ipv4_hdr *)(const void *)(frame + PBOX_ACK_ETH_LEN);
		struct phub_wire_msg msg, parsed;
		uint32_t ipv4 = next_u32(), sum;
		size_t len;

		for (int i = 0; i < 6; i++)
			mac[i] = next_byte();
		pbox_ack_tmpl_init(&t, mac, ipv4);
		len = push_frame(frame, sizeof(frame), &msg, payload);
		ck_assert_int_eq(phub_wire_parse(frame + PBOX_ACK_HDR_OFF, len - PBOX_ACK_HDR_OFF,
				&parsed), PHUB_DROP_OK);
		ack_reference(frame, &parsed, mac, ipv4, want);
		ck_assert_uint_eq(pbox_ack_rewrite(frame, &t, parsed.flags & PHUB_WIRE_F_LAST),
				PBOX_ACK_FRAME_LEN);
		ck_assert_mem_eq(frame, want, PBOX_ACK_FRAME_LEN);
		ck_assert_uint_eq(rte_ipv4_cksum(ip), 0);
		/* The UDP sum over the pseudo-header and the datagram: all ones. */
		sum = (uint32_t)rte_ipv4_phdr_cksum(ip, 0) +
			rte_raw_cksum(ip + 1, 8 + PHUB_WIRE_HDR_LEN);
		sum = (sum & 0xffff) + (sum >> 16);
		ck_assert_uint_eq(sum, 0xffff);
		ck_assert_int_eq(phub_wire_parse(frame + PBOX_ACK_HDR_OFF, PHUB_WIRE_HDR_LEN,
				&msg), PHUB_DROP_OK);
		ck_assert_uint_eq(msg.opcode, PHUB_WIRE_OP_ACK);
		ck_assert_uint_eq(msg.chunk_id, parsed.chunk_id);
	}
}
END_TEST

/*
 * Random frames retargeted to random peers: byte for byte the frame built for the new peer and
 * summed in full (the payload stays, and is summed in the reference).
 */
START_TEST(test_retarget_equals_full_build)
{
	static uint8_t frame[PBOX_ACK_HDR_OFF + 64 + 512 * 4], want[sizeof(frame)],
		payload[512 * 4];

	for (int round = 0; round < 20000; round++) {
		struct rte_ether_hdr *eth = (struct rte_ether_hdr *)(void *)want;
		struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
		struct rte_udp_hdr *udp = (struct rte_udp_hdr *)(ip + 1);
		struct pbox_frame_peer from, to;
		struct phub_wire_msg msg;
		uint16_t csum;
		size_t len;

		len = push_frame(frame, sizeof(frame), &msg, payload);
		memcpy(from.mac, frame, 6);
		memcpy(&from.ipv4, frame + PBOX_ACK_ETH_LEN + 16, 4);
		memcpy(&from.udp_port, frame + PBOX_ACK_ETH_LEN + 20 + 2, 2);
		memcpy(&from.rank, frame + PBOX_ACK_HDR_OFF + 12, 2);
		memcpy(&from.token, frame + PBOX_ACK_HDR_OFF + 24, 8);
		memcpy(&from.aux, frame + PBOX_ACK_HDR_OFF + 48, 4);
		for (int i = 0; i < 6; i++)
			to.mac[i] = next_byte();
		to.ipv4 = round % 9 == 0 ? from.ipv4 : next_u32();
		to.udp_port = (uint16_t)next_u32();
		to.rank = round % 11 == 0 ? 0 : (uint16_t)next_u32();
		to.token = (uint64_t)next_u32() << 32 | next_u32();
		to.aux = round % 5 == 0 ? 0 : next_u32();

		memcpy(want, frame, len);
		memcpy(eth->dst_addr.addr_bytes, to.mac, 6);
		ip->dst_addr = to.ipv4;
		ip->hdr_checksum = 0;
		ip->hdr_checksum = rte_ipv4_cksum(ip);
		udp->dst_port = to.udp_port;
		memcpy(want + PBOX_ACK_HDR_OFF + 12, &to.rank, 2);
		memcpy(want + PBOX_ACK_HDR_OFF + 24, &to.token, 8);
		memcpy(want + PBOX_ACK_HDR_OFF + 48, &to.aux, 4);
		udp->dgram_cksum = 0;
		csum = rte_ipv4_udptcp_cksum(ip, udp);
		udp->dgram_cksum = csum;

		pbox_frame_retarget(frame, &from, &to);
		ck_assert_mem_eq(frame, want, len);
	}
}
END_TEST

Suite *
phub_pbox_csum_suite(void)
{
	Suite *s = suite_create("pbox_csum");

	PHUB_TCASE(s, "templates",
		test_ack_rewrite_equals_general_path,
		test_retarget_equals_full_build);
	return s;
}
