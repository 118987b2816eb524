"""C source of the decoder's interval rows, compiled into ``native_decode``'s extension.

Two functions that write the profile's 44-byte ``INTERVAL_DTYPE`` rows: ``pair_rows`` (each
enter/exit pair's columns and its row in one pass, straight to its launch's room in the
profile's array, the times left raw: the doubles they are) and ``settle`` (each launch's rows
moved after the previous one's and their times finished: ``rint(t + offset)``, an end never
before its start).  Kept apart from ``native_decode.py`` (the records, the pairing and the
Python wrappers) so that each file stays one job; ``native_decode`` places this source after
its shared helpers.
"""

ROWS_C = r"""
/* pair_rows(words, group, level, e_idx, x_idx, units, before, start_clk, base, rate, lrow, row_cta,
   out, dest, room, launch_id, per_row, written, unplaceable) -> -1, or the batch launch that
   has more pairs than its room.  As decode_records._pair_columns and write_intervals, in one
   pass: each pair's row goes straight to out[dest[l] + written[l]++] (l = lrow[its CTA row];
   44 bytes: launch u4, cta u4, unit u4, scope u4, depth u2, lane u2, start f8, end f8, cycles
   i8) with its times raw; a pair whose CTA has no finite base or rate is counted in
   unplaceable[l] instead */
static PyObject *pair_rows(PyObject *self, PyObject *args) {
    PyObject *o[17];
    long long units, before;
    if (!PyArg_ParseTuple(args, "OOOOOLLOOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &units, &before, &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14], &o[15], &o[16]))
        return NULL;
    Py_buffer v[17];
    if (take_buffers(o, v, 17, 10, 17) < 0) return NULL;
    /* 0 words, 1 group, 2 level, 3 e_idx, 4 x_idx, 5 start_clk, 6 base, 7 rate, 8 lrow, 9 row_cta (u32),
       10 out (rows), 11 dest, 12 room, 13 launch_id (u32), 14 per_row, 15 written, 16 unplaceable */
    Py_ssize_t n_rec = v[0].len / 8, k = v[3].len / 8, m = v[5].len / 8, n_l = v[11].len / 8;
    int bad = units <= 0 || v[1].len != n_rec * 8 || v[2].len != n_rec * 8 || v[4].len != k * 8 ||
              v[6].len != m * 8 || v[7].len != m * 8 || v[8].len != m * 8 || v[9].len != m * 4 ||
              v[10].len % 44 || v[12].len != n_l * 8 || v[13].len != n_l * 4 || v[14].len != m * 8 ||
              v[15].len != n_l * 8 || v[16].len != n_l * 8;
    long long over = -1;
    if (!bad) {
        const uint64_t *words = v[0].buf, *start_clk = v[5].buf;
        const int64_t *group = v[1].buf, *level = v[2].buf, *e_idx = v[3].buf, *x_idx = v[4].buf;
        const double *base = v[6].buf, *rate = v[7].buf;
        const int64_t *lrow = v[8].buf, *dest = v[11].buf, *room = v[12].buf;
        const uint32_t *row_cta = v[9].buf, *launch_id = v[13].buf;
        unsigned char *out = v[10].buf;
        int64_t *per_row = v[14].buf, *written = v[15].buf, *unplaceable = v[16].buf;
        Py_ssize_t n_out = v[10].len / 44;
        Py_BEGIN_ALLOW_THREADS
        memset(per_row, 0, m * 8);
        memset(written, 0, n_l * 8);
        memset(unplaceable, 0, n_l * 8);
        for (Py_ssize_t i = 0; i < k; i++) {
            int64_t e = e_idx[i], x = x_idx[i];
            if (e < 0 || e >= n_rec || x < 0 || x >= n_rec) { bad = 2; break; }
            int64_t g = group[e], r = g / units;
            if (g < 0 || r >= m) { bad = 2; break; }
            int64_t l = lrow[r];
            if (l < 0 || l >= n_l) { bad = 2; break; }
            per_row[r]++;
            if (!isfinite(base[r]) || !isfinite(rate[r])) { unplaceable[l]++; continue; }
            if (written[l] >= room[l] || dest[l] + written[l] >= n_out) { over = l; break; }
            uint64_t s_lo = start_clk[r] & 0xFFFFFFFFull;
            int64_t ed = (int64_t)(((words[e] >> 32) - s_lo) & 0xFFFFFFFFull);
            int64_t xd = (int64_t)(((words[x] >> 32) - s_lo) & 0xFFFFFFFFull);
            if (ed >= (1LL << 32) - before) ed -= 1LL << 32;
            if (xd >= (1LL << 32) - before) xd -= 1LL << 32;
            int64_t lv = level[e] - 1;
            uint32_t u32[4] = {launch_id[l], row_cta[r], (uint32_t)(g % units),
                               (uint32_t)((words[e] & 0xFFFFFFFFull) >> 1)};
            uint16_t u16[2] = {(uint16_t)(lv > 0 ? lv : 0), 0};
            double ts = base[r] + (double)ed * rate[r], te = base[r] + (double)xd * rate[r];
            int64_t cycles = xd - ed;
            unsigned char *row = out + 44 * (dest[l] + written[l]++);
            memcpy(row, u32, 16);
            memcpy(row + 16, u16, 4);
            memcpy(row + 20, &ts, 8);
            memcpy(row + 28, &te, 8);
            memcpy(row + 36, &cycles, 8);
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 17);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "pair_rows: array lengths differ"); return NULL; }
    if (bad == 2) { PyErr_SetString(PyExc_IndexError, "pair_rows: a record, CTA row or launch index is out of range"); return NULL; }
    return PyLong_FromLongLong(over);
}

/* settle(out, first, rows, offset, keep) -> rows kept.  out: INTERVAL_DTYPE rows written by
   pair_rows (or their numpy twin) at each launch's place first[i] (room for at least rows[i]); in launch
   order, the rows of each kept launch move down to follow the previous kept launch's and
   their times become rint(t + offset[i]), an end never before its start */
static PyObject *settle(PyObject *self, PyObject *args) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    Py_buffer v[5];
    if (take_buffers(o, v, 5, 0, 1) < 0) return NULL;
    Py_ssize_t n_out = v[0].len / 44, n_l = v[1].len / 8;
    int bad = v[0].len % 44 || v[2].len != n_l * 8 || v[3].len != n_l * 8 || v[4].len != n_l;
    int64_t dst = 0;
    if (!bad) {
        unsigned char *out = v[0].buf;
        const int64_t *first = v[1].buf, *rows = v[2].buf;
        const double *offset = v[3].buf;
        const uint8_t *keep = v[4].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n_l; i++) {
            if (!keep[i] || !rows[i]) continue;
            int64_t src = first[i], n = rows[i];
            if (src < dst || n < 0 || src + n > n_out) { bad = 2; break; }
            if (src != dst) memmove(out + 44 * dst, out + 44 * src, 44 * (size_t)n);
            double off = offset[i];
            for (int64_t r = dst; r < dst + n; r++) {
                unsigned char *row = out + 44 * r;
                double ts, te;
                memcpy(&ts, row + 20, 8);
                memcpy(&te, row + 28, 8);
                int64_t s = (int64_t)nearbyint(ts + off), e = (int64_t)nearbyint(te + off);
                if (e < s) e = s;
                memcpy(row + 20, &s, 8);
                memcpy(row + 28, &e, 8);
            }
            dst += n;
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 5);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "settle: array sizes differ"); return NULL; }
    if (bad == 2) { PyErr_SetString(PyExc_IndexError, "settle: a launch's rows lie outside the output"); return NULL; }
    return PyLong_FromLongLong(dst);
}
"""
