// What ranks tell the coordinator (rank 0) and what it answers.
//
// Negotiation protocol (one control connection between rank 0 and each other
// rank; rank 0's own requests go straight into its table):
//   1. A rank that gets a request (one tensor of a collective call) sends
//      READY{meta} to rank 0: its key (the call's name), op, dtype, shape,
//      reduction, compression, root. A name may be used again and again:
//      rank 0 pairs each rank's k-th request of a key with every other
//      rank's k-th (FIFO), and keeps nothing of a key once its last round
//      completed, so long jobs hold no state per call.
//   2. Rank 0 records it. When every rank is READY for a key, it compares
//      the metas: any difference becomes an ERROR response naming each
//      rank's view. Otherwise the key joins the ready list, in the order keys
//      completed.
//   3. Rank 0 turns the ready list into responses (keys of ops that fuse,
//      e.g. all-reduces of one dtype/reduction/compression, fused into
//      buckets up to the threshold; the rules per op are in protocol/op_traits.cc)
//      and sends EXECUTE{responses} to every rank, then executes them itself.
//      Every rank runs the responses in the order received, so all ranks
//      enter the same collectives in the same order whatever order their
//      requests arrived in.
//   Join (Horovod's hvd.join): a rank that submits JOIN counts as READY, with
//   zeros, for every later all-reduce until every rank has joined; the
//   response then names it in `joined` and carries the keys' metas, so that
//   the joined rank runs the ring with zeros of its own. Any other op while a
//   rank has joined fails on the ranks that submitted it. The JOIN round
//   completes when every rank joined and answers the rank that joined last.
//   4. A key not READY on every rank within the timeout becomes an ERROR
//      naming the ranks that are missing. A rank that hits an unrecoverable
//      error sends BROKEN{reason}; rank 0 forwards it to all.
#pragma once

#include <string>
#include <vector>

#include "custom_ops/comm/core/protocol/request.h"
#include "custom_ops/common/status.h"

namespace tfx::comm {

enum class MessageType : uint8_t { kReady = 1, kExecute = 2, kBroken = 3 };

std::string EncodeReady(const std::vector<EntryMeta>& metas);
std::string EncodeExecute(const std::vector<Response>& responses);
std::string EncodeBroken(const std::string& reason);
Status DecodeReady(const std::string& payload, std::vector<EntryMeta>* metas);
Status DecodeExecute(const std::string& payload, std::vector<Response>* responses);
Status DecodeBroken(const std::string& payload, std::string* reason);

}  // namespace tfx::comm
