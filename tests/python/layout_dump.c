/* SPDX-License-Identifier: BSD-3-Clause */
/* Prints the layout of phub.h's structs as JSON, for the binding's test of its ctypes mirror. */

#include <stddef.h>
#include <stdio.h>

#include "client/phub.h"

#define FIELD(s, f) printf("%s\"%s\": [%zu, %zu]", first++ ? ", " : "", #f, \
		offsetof(struct s, f), sizeof(((struct s *)0)->f))
#define BEGIN(s) do { printf("%s\"%s\": {\"size\": [0, %zu]", \
		n++ ? ", " : "", #s, sizeof(struct s)); first = 1; } while (0)
#define END() printf("}")

int
main(void)
{
	int n = 0, first;

	printf("{");
	BEGIN(phub_key);
	FIELD(phub_key, key_id); FIELD(phub_key, n_elems);
	END();
	BEGIN(phub_key_hyper);
	FIELD(phub_key_hyper, lr); FIELD(phub_key_hyper, weight_decay);
	END();
	BEGIN(phub_connect_params);
	FIELD(phub_connect_params, server); FIELD(phub_connect_params, server_port);
	FIELD(phub_connect_params, bind_addr); FIELD(phub_connect_params, job);
	FIELD(phub_connect_params, nonce); FIELD(phub_connect_params, rank);
	FIELD(phub_connect_params, world_size); FIELD(phub_connect_params, dtype);
	FIELD(phub_connect_params, optimizer); FIELD(phub_connect_params, lr);
	FIELD(phub_connect_params, momentum); FIELD(phub_connect_params, weight_decay);
	FIELD(phub_connect_params, beta1); FIELD(phub_connect_params, beta2);
	FIELD(phub_connect_params, eps); FIELD(phub_connect_params, keys);
	FIELD(phub_connect_params, n_keys); FIELD(phub_connect_params, initial);
	FIELD(phub_connect_params, chunk_bytes); FIELD(phub_connect_params, mtu);
	FIELD(phub_connect_params, window_bytes); FIELD(phub_connect_params, rto_min_ms);
	FIELD(phub_connect_params, rto_max_ms); FIELD(phub_connect_params, dead_ms);
	FIELD(phub_connect_params, connect_timeout_ms); FIELD(phub_connect_params, flags);
	FIELD(phub_connect_params, progress); FIELD(phub_connect_params, progress_arg);
	FIELD(phub_connect_params, key);
	END();
	BEGIN(phub_stats);
	FIELD(phub_stats, tx_datagrams); FIELD(phub_stats, tx_bytes);
	FIELD(phub_stats, rx_datagrams); FIELD(phub_stats, rx_bytes); FIELD(phub_stats, pushes);
	FIELD(phub_stats, retransmits); FIELD(phub_stats, pulls); FIELD(phub_stats, acks);
	FIELD(phub_stats, models); FIELD(phub_stats, replays); FIELD(phub_stats, rx_dropped);
	FIELD(phub_stats, tx_errors); FIELD(phub_stats, pings); FIELD(phub_stats, ops_completed);
	FIELD(phub_stats, srtt_us); FIELD(phub_stats, rttvar_us); FIELD(phub_stats, rto_us);
	FIELD(phub_stats, window_bytes); FIELD(phub_stats, inflight_bytes);
	FIELD(phub_stats, reconnects); FIELD(phub_stats, rollbacks);
	FIELD(phub_stats, tx_csum); FIELD(phub_stats, rx_csum); FIELD(phub_stats, join_acks);
	FIELD(phub_stats, initial_acks); FIELD(phub_stats, initial_models);
	FIELD(phub_stats, pulls_early);
	FIELD(phub_stats, world_size);
	FIELD(phub_stats, world_changes);
	FIELD(phub_stats, tx_gso_sends);
	FIELD(phub_stats, tx_gso_refused);
	FIELD(phub_stats, rx_gro_batches);
	FIELD(phub_stats, rx_gro_refused);
	FIELD(phub_stats, rx_auth_failed);
	END();
	BEGIN(phub_info);
	FIELD(phub_info, job_id); FIELD(phub_info, rank); FIELD(phub_info, world_size);
	FIELD(phub_info, dtype); FIELD(phub_info, chunk_bytes); FIELD(phub_info, segment_elems);
	FIELD(phub_info, n_keys); FIELD(phub_info, n_chunks); FIELD(phub_info, n_segments);
	FIELD(phub_info, n_elems); FIELD(phub_info, n_endpoints);
	FIELD(phub_info, first_iteration);
	END();
	BEGIN(phub_world_change);
	FIELD(phub_world_change, rank); FIELD(phub_world_change, joined);
	FIELD(phub_world_change, iteration);
	END();
	printf("}\n");
	return 0;
}
