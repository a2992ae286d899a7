# Cython declarations for request.py (compiled where a C compiler is: setup.py). Every field is
# the object assigned to it, as a slotted class's (an int stays an int, an enum its member);
# what a loop that names the type gains is the read: a struct member, not an attribute lookup.
cdef class Request:
    cdef public object uid, request_id, arrival_s, prompt_tokens, output_tokens, priority, content, parent
    cdef public object group, beam, num_tokens, status, seq, num_computed_tokens, num_output, pending_output
    cdef public object length_capped, kv, first_scheduled_s, first_scheduled_step, first_token_s, finish_s
    cdef public object finish_step, num_preemptions, prefix_hit_tokens, reject_reason, reject_detail

    cpdef bint advance(self, n, end) except -1
