// SPDX-License-Identifier: MIT
// The script of the HTML report (tools/html.c embeds it in the page): reads
// the profiles' data from the JSON element #tfa-data and
// draws, for the chosen process, the summary, memory over time, flame graphs
// (icicles) of the bytes live at the peak and of the leaks, and the top sites.
//
// Nothing from the data is ever parsed as markup: text goes in through
// textContent and setAttribute only.
//
// The page says how it went in <div id="tfa-status">: data-ok="1" when
// everything was drawn, else data-ok="0" and data-error with the message.
// The location's hash takes options, '&'-separated:
//   process=PID        show that process first
//   zoom=NAME          zoom the peak's flame graph into the first frame NAME
//   search=TEXT        highlight the frames whose name holds TEXT
//   test-zoom=NAME     (for the tests) click the first frame NAME of the peak's
//                      flame graph, then its root, and record what was drawn
//                      each time in <div id="tfa-test">
(function () {
  'use strict';

  var statusEl = document.getElementById('tfa-status');
  var failed = false;

  function fail(msg) {
    failed = true;
    statusEl.setAttribute('data-ok', '0');
    statusEl.setAttribute('data-error', msg);
    statusEl.textContent = 'The report\'s script failed: ' + msg;
    statusEl.hidden = false;
  }

  window.onerror = function (msg, src, line, col) {
    fail(String(msg) + ' (line ' + line + ':' + col + ')');
  };

  var SVGNS = 'http://www.w3.org/2000/svg';

  // ------------------------------------------------------------------
  // DOM helpers: text only, never markup.

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    append(e, kids);
    return e;
  }

  function sv(tag, attrs, kids) {
    var e = document.createElementNS(SVGNS, tag);
    setAttrs(e, attrs);
    append(e, kids);
    return e;
  }

  function setAttrs(e, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === 'text') e.textContent = String(v);
      else e.setAttribute(k, v === true ? '' : String(v));
    });
  }

  function append(e, kids) {
    if (kids === null || kids === undefined) return;
    if (!Array.isArray(kids)) kids = [kids];
    kids.forEach(function (k) {
      if (k === null || k === undefined || k === false) return;
      e.appendChild(typeof k === 'string' || typeof k === 'number'
        ? document.createTextNode(String(k)) : k);
    });
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }

  // ------------------------------------------------------------------
  // Numbers

  var UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];

  function count(n) {
    return Math.round(n).toLocaleString('en-US');
  }

  // "512 bytes", "1.5 KiB"
  function bytes(b) {
    if (b < 1024) return count(b) + (b === 1 ? ' byte' : ' bytes');
    var v = b / 1024, u = 0;
    while (v >= 1024 && u + 1 < UNITS.length) { v /= 1024; u++; }
    return v.toFixed(1) + ' ' + UNITS[u];
  }

  // "1.5 KiB (1,536 bytes)"
  function bytesLong(b) {
    return b < 1024 ? bytes(b) : bytes(b) + ' (' + count(b) + ' bytes)';
  }

  function plural(n, one, many) {
    return count(n) + ' ' + (n === 1 ? one : many);
  }

  function pct(part, whole) {
    if (!(whole > 0)) return '';
    var v = 100 * part / whole;
    return (v >= 10 || v === 0 ? v.toFixed(1) : v < 0.1 ? v.toPrecision(1) : v.toFixed(2)) + '%';
  }

  // A duration in ns as people read it: "812 ns", "3.2 ms", "1.250 s", "2 min 5 s".
  function duration(ns) {
    if (ns < 1e3) return ns + ' ns';
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + ' µs';
    if (ns < 1e9) return (ns / 1e6).toFixed(1) + ' ms';
    if (ns < 120e9) return (ns / 1e9).toFixed(3) + ' s';
    var s = Math.round(ns / 1e9);
    if (s < 7200) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + Math.floor(s % 3600 / 60) + ' min';
  }

  function baseName(path) {
    if (!path) return '';
    var i = path.lastIndexOf('/');
    return i >= 0 && i + 1 < path.length ? path.slice(i + 1) : path;
  }

  // ------------------------------------------------------------------
  // Stacks

  function frameAt(p, index) {
    var f = p.frames[index];
    return { name: f[0], file: f[1], line: f[2], module: f[3], inlined: f[4] === 1 };
  }

  // Frames of a stack id, innermost first; null when there is none.
  function stackOf(p, id) {
    if (!id) return null;
    var s = p.stacks_by_id[String(id)];
    return s ? s.map(function (i) { return frameAt(p, i); }) : null;
  }

  function frameLoc(f) {
    if (!f.file) return f.module ? baseName(f.module) : '';
    return f.file + (f.line ? ':' + f.line : '');
  }

  function shortLocation(f) {
    // A frame named "module+0xoffset" says its module already.
    if (!f.file) return f.module && f.name.indexOf(baseName(f.module) + '+') !== 0 ? baseName(f.module) : '';
    return baseName(f.file) + (f.line ? ':' + f.line : '');
  }

  function noStackLabel(p, id) {
    if (id) return '(stack ' + id + ': not in this profile)';
    return p.stacks.sample_bytes ? '(no stack: not sampled)' : '(no stack recorded)';
  }

  // The whole stack as lines, innermost first (a title).
  function stackText(p, id) {
    var frames = stackOf(p, id);
    if (!frames) return noStackLabel(p, id);
    var lines = frames.map(function (f, i) {
      var loc = frameLoc(f);
      return '#' + i + ' ' + f.name + (loc ? '  ' + loc : '') + (f.inlined ? ' (inlined)' : '');
    });
    return lines.join('\n');
  }

  // "fn (file:line) ← caller (file:line) ← ...", the innermost `max` frames.
  function stackCell(p, id, max) {
    var frames = stackOf(p, id);
    var td = el('td', { 'class': 'frames', title: stackText(p, id) });
    if (!frames) {
      td.textContent = noStackLabel(p, id);
      return td;
    }
    frames.slice(0, max).forEach(function (f, i) {
      if (i > 0) td.appendChild(el('span', { 'class': 'sep', text: '←' }));
      td.appendChild(el('span', { 'class': 'fn', text: f.name }));
      var loc = shortLocation(f);
      if (loc) td.appendChild(el('span', { 'class': 'loc', text: ' ' + loc }));
    });
    if (frames.length > max)
      td.appendChild(el('span', { 'class': 'sep', text: '← … ' + (frames.length - max) + ' more' }));
    return td;
  }

  // ------------------------------------------------------------------
  // Summary

  function primaryDevice(p) {
    for (var i = 0; i < p.devices.length; i++)
      if (p.devices[i].device === 'cpu') return p.devices[i];
    return p.devices[0] || null;
  }

  function leakSums(p) {
    var b = 0, n = 0;
    p.leaks.forEach(function (l) { b += l.bytes; n += l.blocks; });
    return { bytes: b, blocks: n };
  }

  function endText(p) {
    switch (p.end_reason) {
      case 'exit': return 'exited with status ' + p.exit_code;
      case 'signal': return 'killed by signal ' + p.exit_code + (p.signal ? ' (' + p.signal + ')' : '');
      case 'exec': return 'replaced its image by exec';
      case 'running': return 'still running when written';
      case 'unknown': return 'ended without telling how';
      default: return 'end: ' + p.end_reason;
    }
  }

  function startText(p) {
    var ms = Number(p.start_ns.length > 6 ? p.start_ns.slice(0, -6) : '0');
    var d = new Date(ms);
    if (isNaN(d.getTime())) return '';
    return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  }

  function card(k, v, s, cls) {
    return el('div', { 'class': 'card' + (cls ? ' ' + cls : '') }, [
      el('div', { 'class': 'k', text: k }),
      el('div', { 'class': 'v', text: v }),
      s ? el('div', { 'class': 's', text: s }) : null
    ]);
  }

  function renderSummary(box, p) {
    var title = p.command || p.comm || p.exe || '?';
    box.appendChild(el('h2', { id: 'tfa-process-title' }, 'Process ' + p.pid + ': ' + title));
    box.appendChild(el('div', { 'class': 'meta' }, [
      'executable ', el('b', { text: p.exe || '?' }), ' · parent ', el('b', { text: String(p.ppid) }),
      ' · profile ', el('b', { text: p.file })
    ]));
    var st = p.stacks;
    box.appendChild(el('div', { 'class': 'meta' }, [
      'stacks: ' + (st.mode === 'none' ? 'not recorded' : st.mode + ', up to ' + st.depth +
        ' frames, ' + count(st.distinct) + ' distinct' +
        (st.sample_bytes ? ', sampled every ' + bytes(st.sample_bytes) + ' on average (site figures are estimates)' : '')),
      ' · tfalloc ' + p.tfalloc_version
    ]));

    var badges = el('div', { 'class': 'badges' });
    badges.appendChild(p.complete
      ? el('span', { 'class': 'badge ok', id: 'tfa-complete', text: 'complete profile' })
      : el('span', { 'class': 'badge snap', id: 'tfa-complete', text: 'snapshot: written while the process ran' }));
    if (p.forked) badges.appendChild(el('span', { 'class': 'badge', text: 'fork child: inherited its parent\'s heap' }));
    if (p.degraded) badges.appendChild(el('span', { 'class': 'badge bad', text: 'degraded: the shim ran out of memory, figures are partial' }));
    box.appendChild(badges);

    var d = primaryDevice(p);
    var cards = el('div', { 'class': 'cards', id: 'tfa-summary' });
    var leaks = leakSums(p);
    var errs = p.error_totals;
    var nerr = errs.double_free + errs.invalid_free + errs.mismatched_free;
    if (d) {
      cards.appendChild(card('Peak in use', bytes(d.peak_bytes_in_use),
        count(d.peak_bytes_in_use) + ' bytes requested, ' + count(d.peak_allocated_bytes_in_use) + ' allocated'));
      cards.appendChild(card('Allocations', count(d.num_allocs),
        plural(d.num_frees, 'free', 'frees') + ', ' + plural(d.num_reallocs, 'realloc', 'reallocs') +
        '; ' + bytes(d.total_bytes) + ' in all'));
    }
    cards.appendChild(card(p.complete ? 'Leaked at exit' : 'In use at the snapshot', bytes(leaks.bytes),
      plural(leaks.blocks, 'block', 'blocks') + (leaks.bytes >= 1024 ? ', ' + count(leaks.bytes) + ' bytes' : ''),
      p.complete && leaks.bytes > 0 ? 'bad' : ''));
    cards.appendChild(card('Duration', p.duration_ns === null ? 'unknown' : duration(p.duration_ns),
      'started ' + startText(p)));
    cards.appendChild(card('Ended', p.complete ? (p.end_reason === 'exit' ? 'exit ' + p.exit_code : p.signal || p.end_reason) : 'snapshot',
      endText(p)));
    cards.appendChild(card('Memory errors', count(nerr),
      nerr === 0 ? 'double, invalid or mismatched frees' :
        [errs.double_free ? plural(errs.double_free, 'double free', 'double frees') : '',
         errs.invalid_free ? plural(errs.invalid_free, 'invalid free', 'invalid frees') : '',
         errs.mismatched_free ? plural(errs.mismatched_free, 'mismatched free', 'mismatched frees') : '']
          .filter(Boolean).join(', '), nerr > 0 ? 'bad' : ''));
    if (d) {
      cards.appendChild(card('Largest block', bytes(d.largest_alloc_size),
        'allocator ' + d.allocator + (d.bytes_limit ? ', limit ' + bytes(d.bytes_limit) : '')));
    }
    box.appendChild(cards);

    if (p.devices.length > 1) {
      var cols = [['device', 'device'], ['allocator', 'allocator'], ['num_allocs', 'allocations'],
        ['peak_bytes_in_use', 'peak in use'], ['bytes_in_use', 'in use at the end'],
        ['total_bytes', 'total allocated'], ['largest_alloc_size', 'largest block']];
      var t = el('table', { 'class': 'devices' });
      t.appendChild(el('tr', null, cols.map(function (c) { return el('th', { text: c[1] }); })));
      p.devices.forEach(function (dev) {
        t.appendChild(el('tr', null, cols.map(function (c) {
          var v = dev[c[0]];
          return el('td', { text: typeof v === 'number' && c[0] !== 'num_allocs' ? bytes(v) : typeof v === 'number' ? count(v) : v });
        })));
      });
      box.appendChild(t);
    }
  }

  // ------------------------------------------------------------------
  // Memory over time

  var SERIES = [
    { key: 'bytes_in_use', label: 'in use (requested bytes)', color: 'var(--in-use)' },
    { key: 'allocated_bytes', label: 'allocated (the allocator\'s blocks)', color: 'var(--allocated)' },
    { key: 'rss_bytes', label: 'resident set (RSS, right axis)', color: 'var(--rss)' }
  ];

  // Ticks 0, s, 2s, ... up to at least max, s a 1-2-5 step of a binary unit.
  function byteTicks(max) {
    var unit = 1, u = -1;
    while (max / unit >= 1024 && u + 1 < UNITS.length) { unit *= 1024; u++; }
    var v = max / unit, step = 1;
    var steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
    for (var i = 0; i < steps.length; i++) { step = steps[i]; if (v / step <= 6) break; }
    var ticks = [];
    for (var k = 0; k * step < v + 1e-9 || ticks.length < 2; k++) ticks.push(k * step * unit);
    if (ticks[ticks.length - 1] < max) ticks.push(ticks.length * step * unit);
    return {
      ticks: ticks,
      label: function (b) { return b === 0 ? '0' : u < 0 ? b + ' B' : +(b / unit).toFixed(3) + ' ' + UNITS[u]; }
    };
  }

  function timeTicks(max) {
    var units = [[1e9, 's'], [1e6, 'ms'], [1e3, 'µs'], [1, 'ns']];
    var unit = units[3];
    for (var i = 0; i < units.length; i++) if (max >= units[i][0]) { unit = units[i]; break; }
    var v = max / unit[0], step = 1, mag = Math.pow(10, Math.floor(Math.log10(Math.max(v, 1e-9))));
    var cands = [0.1, 0.2, 0.5, 1, 2, 5, 10];
    for (var j = 0; j < cands.length; j++) { step = cands[j] * mag; if (v / step <= 8) break; }
    var ticks = [];
    for (var k = 0; k * step <= v * (1 + 1e-9); k++) ticks.push(k * step * unit[0]);
    var digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    return {
      ticks: ticks, unit: unit[1],
      label: function (t) { return (t / unit[0]).toFixed(digits); }
    };
  }

  // opt (a CUDA device's series): id of the svg, series shown, left axis title.
  function Plot(box, p, opt) {
    this.p = p;
    this.box = box;
    this.opt = opt || {};
    this.idp = this.opt.id || 'tfa-timeline';
    this.hidden = {};
    var self = this;
    var legend = el('div', { 'class': 'legend' });
    SERIES.forEach(function (s) {
      if (self.opt.only && self.opt.only.indexOf(s.key) < 0) { self.hidden[s.key] = true; return; }
      var cb = el('input', { type: 'checkbox', checked: true, 'data-series': s.key });
      cb.addEventListener('change', function () { self.hidden[s.key] = !cb.checked; self.draw(); });
      legend.appendChild(el('label', null, [cb, el('span', { 'class': 'sw', style: 'background:' + s.color }), s.label]));
    });
    box.appendChild(legend);
    this.holder = el('div', { 'class': 'plot' });
    box.appendChild(this.holder);
    this.readout = el('div', { 'class': 'readout', text: ' ' });
    box.appendChild(this.readout);
    this.draw();
  }

  Plot.prototype.draw = function () {
    var p = this.p, tl = p.timeline, n = tl.t_ns.length, self = this;
    clear(this.holder);
    var W = Math.max(this.holder.clientWidth || this.box.clientWidth || 960, 420), H = 300;
    // The heap's figures on the left axis; the resident set, often many times
    // larger (code, libraries, the allocator's caches), on its own at the right.
    var showRss = !this.hidden.rss_bytes;
    var m = { l: 78, r: showRss ? 78 : 24, t: 26, b: 42 };
    var w = W - m.l - m.r, h = H - m.t - m.b;
    var tMax = Math.max(n ? tl.t_ns[n - 1] : 0, 1);
    var yMax = 1, rMax = 1;
    ['bytes_in_use', 'allocated_bytes'].forEach(function (k) {
      if (!self.hidden[k]) tl[k].forEach(function (v) { if (v > yMax) yMax = v; });
    });
    tl.rss_bytes.forEach(function (v) { if (v > rMax) rMax = v; });
    var yt = byteTicks(yMax), rt = byteTicks(rMax), xt = timeTicks(tMax);
    var yTop = yt.ticks[yt.ticks.length - 1], rTop = rt.ticks[rt.ticks.length - 1];
    var X = function (t) { return m.l + w * t / tMax; };
    var Y = function (v) { return m.t + h - h * v / yTop; };
    var R = function (v) { return m.t + h - h * v / rTop; };
    var scaleOf = function (key) { return key === 'rss_bytes' ? R : Y; };
    var svg = sv('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, id: this.idp,
      role: 'img', 'aria-label': 'memory over time' });
    var grid = sv('g', { 'class': 'grid' }), axis = sv('g', { 'class': 'axis' });
    yt.ticks.forEach(function (v) {
      grid.appendChild(sv('line', { x1: m.l, x2: m.l + w, y1: Y(v), y2: Y(v) }));
      axis.appendChild(sv('text', { x: m.l - 6, y: Y(v) + 4, 'text-anchor': 'end', text: yt.label(v) }));
    });
    xt.ticks.forEach(function (t) {
      if (t > tMax * (1 + 1e-9)) return;
      axis.appendChild(sv('line', { x1: X(t), x2: X(t), y1: m.t + h, y2: m.t + h + 4 }));
      axis.appendChild(sv('text', { x: X(t), y: m.t + h + 16, 'text-anchor': 'middle', text: xt.label(t) }));
    });
    axis.appendChild(sv('line', { x1: m.l, x2: m.l + w, y1: m.t + h, y2: m.t + h }));
    axis.appendChild(sv('line', { x1: m.l, x2: m.l, y1: m.t, y2: m.t + h }));
    if (showRss) {
      var rx = m.l + w, raxis = sv('g', { 'class': 'axis rss', id: this.idp === 'tfa-timeline' ? 'tfa-rss-axis' : this.idp + '-rss-axis' });
      raxis.appendChild(sv('line', { x1: rx, x2: rx, y1: m.t, y2: m.t + h }));
      rt.ticks.forEach(function (v) {
        raxis.appendChild(sv('line', { x1: rx, x2: rx + 4, y1: R(v), y2: R(v) }));
        raxis.appendChild(sv('text', { x: rx + 7, y: R(v) + 4, 'text-anchor': 'start', text: rt.label(v) }));
      });
      axis.appendChild(raxis);
      svg.appendChild(sv('text', { 'class': 'title', x: W - 12, y: m.t + h / 2, 'text-anchor': 'middle',
        transform: 'rotate(90 ' + (W - 12) + ' ' + (m.t + h / 2) + ')', text: 'resident set (RSS)' }));
    }
    svg.appendChild(grid);
    svg.appendChild(axis);
    svg.appendChild(sv('text', { 'class': 'title', x: m.l + w / 2, y: H - 6, 'text-anchor': 'middle',
      text: 'time since the process started (' + xt.unit + ')' }));
    svg.appendChild(sv('text', { 'class': 'title', x: 14, y: m.t + h / 2, 'text-anchor': 'middle',
      transform: 'rotate(-90 14 ' + (m.t + h / 2) + ')', text: this.opt.title || 'heap: bytes in use and allocated' }));

    // Series, in the order rss (behind) to bytes in use (front): one point per timeline point.
    SERIES.slice().reverse().forEach(function (s) {
      if (self.hidden[s.key]) return;
      var d = '', S = scaleOf(s.key);
      for (var i = 0; i < n; i++)
        d += (i ? ' L' : 'M') + X(tl.t_ns[i]).toFixed(1) + ',' + S(tl[s.key][i]).toFixed(1);
      svg.appendChild(sv('path', { 'class': 'series ' + s.key, 'data-series': s.key, 'data-points': n, d: d || 'M0,0' }));
      if (n === 1)
        svg.appendChild(sv('circle', { cx: X(tl.t_ns[0]), cy: S(tl[s.key][0]), r: 3, fill: s.color }));
    });

    // The peak: the point flagged as the peak, else the most in use.
    var pk = -1;
    for (var i = 0; i < n; i++) if (tl.flags[i] & 1) pk = i;
    if (pk < 0) for (i = 0; i < n; i++) if (pk < 0 || tl.bytes_in_use[i] > tl.bytes_in_use[pk]) pk = i;
    if (pk >= 0 && !this.hidden.bytes_in_use) {
      var px = X(tl.t_ns[pk]), py = Y(tl.bytes_in_use[pk]);
      var label = 'peak ' + bytes(tl.bytes_in_use[pk]) + ' at ' + duration(tl.t_ns[pk]);
      var right = px > m.l + w * 0.6;
      svg.appendChild(sv('g', { 'class': 'peak', id: this.idp === 'tfa-timeline' ? 'tfa-peak-marker' : this.idp + '-peak', 'data-index': pk }, [
        sv('title', { text: label + ((tl.flags[pk] & 1) ? ' (its time known to one interval, ' + duration(tl.interval_ns) + ')' : '') }),
        sv('circle', { cx: px, cy: py, r: 5 }),
        sv('text', { x: right ? px - 9 : px + 9, y: Math.max(py - 8, m.t + 10), 'text-anchor': right ? 'end' : 'start', text: label })
      ]));
    }

    // A cursor that reads the figures of the nearest point.
    var cursor = sv('g', { 'class': 'cursor', visibility: 'hidden' }, sv('line', { y1: m.t, y2: m.t + h }));
    svg.appendChild(cursor);
    var overlay = sv('rect', { x: m.l, y: m.t, width: w, height: h, fill: 'transparent' });
    svg.appendChild(overlay);
    overlay.addEventListener('mousemove', function (ev) {
      if (!n) return;
      var r = svg.getBoundingClientRect();
      var t = (ev.clientX - r.left - m.l) / w * tMax, best = 0;
      for (var k = 1; k < n; k++) if (Math.abs(tl.t_ns[k] - t) < Math.abs(tl.t_ns[best] - t)) best = k;
      var x = X(tl.t_ns[best]);
      cursor.firstChild.setAttribute('x1', x);
      cursor.firstChild.setAttribute('x2', x);
      cursor.setAttribute('visibility', 'visible');
      self.readout.textContent = 'at ' + duration(tl.t_ns[best]) + ': in use ' + bytesLong(tl.bytes_in_use[best]) +
        ', allocated ' + bytesLong(tl.allocated_bytes[best]) + ', RSS ' + bytesLong(tl.rss_bytes[best]) +
        ((tl.flags[best] & 1) ? ' — the peak' : '');
    });
    overlay.addEventListener('mouseleave', function () {
      cursor.setAttribute('visibility', 'hidden');
      self.readout.textContent = ' ';
    });
    this.holder.appendChild(svg);
  };

  function renderTimeline(sec, p) {
    var tl = p.timeline, n = tl.t_ns.length;
    sec.appendChild(el('h3', { text: 'Memory over time' }));
    if (!n) {
      sec.appendChild(el('div', { 'class': 'empty', text: 'No timeline in this profile.' }));
      return null;
    }
    sec.appendChild(el('div', { 'class': 'note', text: plural(n, 'point', 'points') + ' over ' +
      duration(tl.t_ns[n - 1]) + ' (one every ' + duration(tl.interval_ns) +
      ' or more, plus the peak and the end): requested bytes in use and the allocator\'s bytes for them (left axis), and the resident set of the process (right axis).' }));
    var panel = el('div', { 'class': 'panel' });
    sec.appendChild(panel);
    var plot = new Plot(panel, p);
    // Each CUDA device's bytes in use over time, on its own plot.
    (p.device_timelines || []).forEach(function (dt) {
      var m = dt.t_ns.length;
      if (!m) return;
      sec.appendChild(el('h4', { text: 'Memory over time on ' + dt.device }));
      var dpanel = el('div', { 'class': 'panel' });
      sec.appendChild(dpanel);
      var zeros = dt.t_ns.map(function () { return 0; });
      new Plot(dpanel, { timeline: { interval_ns: dt.interval_ns, t_ns: dt.t_ns, bytes_in_use: dt.bytes_in_use,
        allocated_bytes: dt.bytes_in_use, rss_bytes: zeros, flags: dt.flags } },
        { id: 'tfa-timeline-' + dt.device.replace(/[^a-z0-9_]/g, '_'), only: ['bytes_in_use'],
          title: dt.device + ': bytes in use' });
    });
    return plot;
  }

  // ------------------------------------------------------------------
  // Flame graphs (icicles: the root at the top, callees below)

  function Node(name, parent, frame, kind) {
    this.name = name;
    this.parent = parent;
    this.frame = frame;      // {name, file, line, module, inlined} or null
    this.kind = kind;        // 'root', 'frame', 'device', 'none'
    this.value = 0;
    this.locs = {};          // "file:line" -> bytes
    this.kids = [];
    this.byKey = {};
    this.depth = parent ? parent.depth + 1 : 0;
    this.x = 0;              // bytes left of it, from the root's left edge
  }

  Node.prototype.child = function (key, name, frame, kind) {
    var c = this.byKey[key];
    if (!c) {
      c = new Node(name, this, frame, kind);
      this.byKey[key] = c;
      this.kids.push(c);
    }
    return c;
  };

  // items: [{stack, value, device}]; the root holds their sum.
  function buildTree(p, items, rootName) {
    var root = new Node(rootName, null, null, 'root');
    var devices = {};
    items.forEach(function (it) { if (it.value > 0) devices[it.device] = true; });
    var byDevice = Object.keys(devices).length > 1;
    var cut = {};
    (p.cut_stacks || []).forEach(function (id) { cut[id] = true; });
    items.forEach(function (it) {
      if (!(it.value > 0)) return;
      var cur = root;
      root.value += it.value;
      if (byDevice) {
        cur = cur.child('d\u0000' + it.device, 'device ' + it.device, null, 'device');
        cur.value += it.value;
      }
      var frames = stackOf(p, it.stack);
      if (!frames) {
        var label = noStackLabel(p, it.stack);
        cur = cur.child('n\u0000' + label, label, null, 'none');
        cur.value += it.value;
        return;
      }
      if (cut[it.stack]) {
        // Its outermost frames were not recorded: grouped apart, not mistaken for roots.
        var cutLabel = '(stacks cut at ' + p.stacks.depth + ' frames)';
        cur = cur.child('c\u0000', cutLabel, null, 'none');
        cur.value += it.value;
      }
      for (var i = frames.length - 1; i >= 0; i--) {
        var f = frames[i];
        cur = cur.child('f\u0000' + f.name + '\u0000' + (f.module || ''), f.name, f, 'frame');
        cur.value += it.value;
        var loc = frameLoc(f);
        if (loc) cur.locs[loc] = (cur.locs[loc] || 0) + it.value;
        if (f.inlined) cur.inlined = true;
      }
    });
    var maxDepth = 0;
    (function layout(n) {
      if (n.depth > maxDepth) maxDepth = n.depth;
      n.kids.sort(function (a, b) { return b.value - a.value || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0); });
      var x = n.x;
      n.kids.forEach(function (k) { k.x = x; x += k.value; layout(k); });
    })(root);
    root.maxDepth = maxDepth;
    return root;
  }

  var ROW = 18;

  function hash(s) {
    var h = 2166136261;
    for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }

  function color(n, palette) {
    if (n.kind === 'root') return '#c9ced6';
    if (n.kind === 'none') return '#dfe3e8';
    if (n.kind === 'device') return '#a9c7f5';
    var h = hash(n.name), v1 = (h & 0xff) / 255, v2 = ((h >>> 8) & 0xff) / 255;
    if (palette === 'leak') // reds and purples
      return 'hsl(' + Math.round(330 + 40 * v1) % 360 + ',' + Math.round(55 + 25 * v2) + '%,' + Math.round(68 + 10 * v1) + '%)';
    // warm: the classic flame graph's oranges and yellows
    return 'hsl(' + Math.round(18 + 38 * v1) + ',' + Math.round(80 + 15 * v2) + '%,' + Math.round(58 + 10 * v2) + '%)';
  }

  function FlameGraph(box, p, root, opts) {
    this.p = p;
    this.root = root;
    this.opts = opts;
    this.zoomed = root;
    var self = this;
    var bar = el('div', { 'class': 'toolbar' });
    this.resetBtn = el('button', { type: 'button', disabled: true, text: 'Reset zoom' });
    this.resetBtn.addEventListener('click', function () { self.zoom(self.root); });
    this.zoomLabel = el('span', { 'class': 'note grow' });
    this.query = '';
    this.search = el('input', { type: 'search', placeholder: 'highlight frames…', 'aria-label': 'highlight frames whose name holds' });
    this.search.addEventListener('input', function () { self.highlight(self.search.value); });
    this.matchLabel = el('span', { 'class': 'note match-label' });
    bar.appendChild(this.resetBtn);
    bar.appendChild(this.zoomLabel);
    bar.appendChild(this.matchLabel);
    bar.appendChild(this.search);
    box.appendChild(bar);
    this.holder = el('div', { 'class': 'flame', id: opts.id });
    box.appendChild(this.holder);
    this.details = el('div', { 'class': 'details', text: 'Point at a frame for its figures; click it to zoom into it, click the top bar to zoom out.' });
    box.appendChild(this.details);
    this.draw();
  }

  FlameGraph.prototype.describe = function (n) {
    var total = this.root.value;
    var lines = [n.name];
    var locs = Object.keys(n.locs).sort(function (a, b) { return n.locs[b] - n.locs[a]; });
    locs.slice(0, 4).forEach(function (l) { lines.push(l); });
    if (locs.length > 4) lines.push('… and ' + (locs.length - 4) + ' more lines');
    if (n.frame && n.frame.module) lines.push('in ' + n.frame.module);
    if (n.inlined) lines.push('(inlined)');
    lines.push(bytesLong(n.value) + ', ' + pct(n.value, total) + ' of ' + this.opts.what);
    return lines.join('\n');
  };

  FlameGraph.prototype.draw = function () {
    var self = this, z = this.zoomed, root = this.root;
    clear(this.holder);
    var W = Math.max(this.holder.clientWidth || 960, 320);
    this.width = W;
    var H = (root.maxDepth + 1) * ROW;
    var svg = sv('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'data-width': W });
    var scale = W / z.value;
    var onPath = {};
    for (var a = z; a; a = a.parent) onPath[a.depth] = a;
    var deepest = z.depth;

    function frameEl(n, x, w, ancestor) {
      var match = self.matches(n);
      var g = sv('g', { 'class': 'frame' + (ancestor ? ' ancestor' : '') + (n.inlined ? ' inlined' : '') + (match ? ' match' : ''),
        'data-name': n.name, 'data-kind': n.kind, 'data-value': n.value });
      g.tfaNode = n;
      g.appendChild(sv('title', { text: self.describe(n) + (n === root ? '\nclick to zoom out' : n === z ? '\nclick to zoom out a level' : '\nclick to zoom') }));
      g.appendChild(sv('rect', { x: x.toFixed(2), y: n.depth * ROW, width: Math.max(w, 0.5).toFixed(2),
        height: ROW - 1, rx: 1.5, fill: match ? '#c86bfa' : color(n, self.opts.palette), 'data-name': n.name }));
      var label = n === root ? n.name + ': ' + bytes(n.value) : n.name;
      var fit = Math.floor((w - 6) / 6.6);
      if (fit >= 3) {
        if (label.length > fit) label = label.slice(0, fit - 1) + '…';
        g.appendChild(sv('text', { x: (x + 3).toFixed(2), y: n.depth * ROW + ROW - 5.5, text: label }));
      }
      svg.appendChild(g);
      if (n.depth > deepest) deepest = n.depth;
    }

    // The zoomed frame's callers, full width.
    for (var d = 0; d < z.depth; d++) frameEl(onPath[d], 0, W, true);
    (function walk(n) {
      var x = (n.x - z.x) * scale, w = n.value * scale;
      if (w < 0.5 && n !== z) return;
      frameEl(n, x, w, false);
      n.kids.forEach(walk);
    })(z);

    // As tall as what is drawn: a zoomed frame's subtree may be shallower than the whole.
    H = (deepest + 1) * ROW;
    svg.setAttribute('height', H);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.addEventListener('click', function (ev) {
      var g = ev.target.closest ? ev.target.closest('g.frame') : null;
      // A frame zooms into it; the zoomed frame itself zooms out a level; the root, all the way.
      if (g && g.tfaNode) self.zoom(g.tfaNode === self.zoomed && g.tfaNode.parent ? g.tfaNode.parent : g.tfaNode);
    });
    svg.addEventListener('mouseover', function (ev) {
      var g = ev.target.closest ? ev.target.closest('g.frame') : null;
      if (!g || !g.tfaNode) return;
      var n = g.tfaNode;
      clear(self.details);
      append(self.details, [el('b', { text: n.name }), ' — ', self.describe(n).split('\n').slice(1).join(' · ')]);
    });
    this.holder.appendChild(svg);
    this.svg = svg;
    this.resetBtn.disabled = z === root;
    this.zoomLabel.textContent = z === root ? '' : 'zoomed into ' + z.name + ' (' + bytes(z.value) + ', ' + pct(z.value, root.value) + ')';
    this.holder.setAttribute('data-zoom', z === root ? '' : z.name);
    var m = this.query ? this.matched() : 0;
    this.matchLabel.textContent = this.query ? 'matched: ' + bytes(m) + ' (' + (pct(m, root.value) || '0%') + ')' : '';
    this.matchLabel.setAttribute('data-matched', m);
  };

  FlameGraph.prototype.zoom = function (n) {
    this.zoomed = n;
    this.draw();
  };

  // Frames whose name holds q (as typed, case-insensitive) stand out; the
  // label tells the bytes under them, each byte counted once.
  FlameGraph.prototype.highlight = function (q) {
    this.query = q;
    if (this.search.value !== q) this.search.value = q;
    this.draw();
  };

  FlameGraph.prototype.matches = function (n) {
    return this.query !== '' && n.kind !== 'root' && n.name.toLowerCase().indexOf(this.query.toLowerCase()) >= 0;
  };

  FlameGraph.prototype.matched = function () {
    var self = this, sum = 0;
    (function walk(n) {
      if (self.matches(n)) { sum += n.value; return; }
      n.kids.forEach(walk);
    })(this.root);
    return sum;
  };

  // The first frame named name, outermost first.
  FlameGraph.prototype.find = function (name) {
    var gs = this.svg.querySelectorAll('g.frame');
    for (var i = 0; i < gs.length; i++) if (gs[i].getAttribute('data-name') === name) return gs[i];
    return null;
  };

  function renderFlame(sec, p, title, note, items, opts) {
    sec.appendChild(el('h3', { text: title }));
    if (p.stacks.mode === 'none' || (!p.sites.length && !p.stacks.distinct)) {
      sec.appendChild(el('div', { 'class': 'empty', id: opts.id,
        text: 'No stacks in this profile: they were not recorded (TFALLOC_STACKS=none, or a tfalloc without stacks).' }));
      return null;
    }
    sec.appendChild(el('div', { 'class': 'note', text: note }));
    var root = buildTree(p, items, opts.rootName);
    if (!(root.value > 0)) {
      sec.appendChild(el('div', { 'class': 'empty', id: opts.id, text: opts.empty }));
      return null;
    }
    var panel = el('div', { 'class': 'panel' });
    sec.appendChild(panel);
    return new FlameGraph(panel, p, root, opts);
  }

  function peakItems(p) {
    var items = p.sites.map(function (s) { return { stack: s.stack, value: s.bytes_at_peak, device: s.device }; });
    // What no site holds: allocations without a stack (the runtime's, or made while the shim started).
    if (!p.stacks.sample_bytes) {
      p.devices.forEach(function (d) {
        var sum = 0;
        p.sites.forEach(function (s) { if (s.device === d.device) sum += s.bytes_at_peak; });
        if (d.peak_bytes_in_use > sum) items.push({ stack: 0, value: d.peak_bytes_in_use - sum, device: d.device });
      });
    }
    return items;
  }

  function leakItems(p) {
    return p.leaks.map(function (l) { return { stack: l.stack, value: l.bytes, device: l.device }; });
  }

  // ------------------------------------------------------------------
  // Top sites

  var TOP = 10;

  function deviceFigure(p, device, key) {
    for (var i = 0; i < p.devices.length; i++) if (p.devices[i].device === device) return p.devices[i][key];
    return 0;
  }

  function siteTable(p, key) {
    var rows = p.sites.filter(function (s) { return s[key] > 0; });
    rows.sort(function (a, b) { return b[key] - a[key] || b.total_bytes - a.total_bytes || a.stack - b.stack; });
    var multi = p.devices.length > 1;
    var head, cells;
    var leakedHead = p.complete ? 'leaked' : 'in use';
    if (key === 'bytes_at_peak') {
      head = ['#', 'at the peak', 'share', 'allocations', leakedHead];
      cells = function (s) {
        return [bytesLong(s.bytes_at_peak), pct(s.bytes_at_peak, deviceFigure(p, s.device, 'peak_bytes_in_use')),
          count(s.num_allocs), bytes(s.bytes_in_use)];
      };
    } else if (key === 'total_bytes') {
      head = ['#', 'allocated', 'share', 'allocations', leakedHead];
      cells = function (s) {
        return [bytesLong(s.total_bytes), pct(s.total_bytes, deviceFigure(p, s.device, 'total_bytes')),
          count(s.num_allocs), bytes(s.bytes_in_use)];
      };
    } else {
      head = ['#', 'allocations', 'allocated', 'mean size', leakedHead];
      cells = function (s) {
        return [count(s.num_allocs), bytesLong(s.total_bytes), bytes(s.num_allocs ? Math.round(s.total_bytes / s.num_allocs) : 0),
          bytes(s.bytes_in_use)];
      };
    }
    if (multi) head.push('device');
    head.push('innermost frames');
    return makeTable(p, rows, head, function (s, i) {
      var tds = [el('td', { 'class': 'num', text: String(i + 1) })].concat(cells(s).map(function (v) {
        return el('td', { 'class': 'num', text: v });
      }));
      if (multi) tds.push(el('td', { text: s.device }));
      tds.push(stackCell(p, s.stack, 4));
      return tds;
    }, 'No allocation site with ' + (key === 'num_allocs' ? 'allocations' : key === 'total_bytes' ? 'bytes allocated' : 'bytes at the peak') +
      (p.stacks.mode === 'none' ? ' (stacks were not recorded)' : '') + '.');
  }

  function leakTable(p) {
    var rows = p.leaks.slice();
    rows.sort(function (a, b) { return b.bytes - a.bytes || b.blocks - a.blocks; });
    var total = leakSums(p).bytes;
    var multi = p.devices.length > 1;
    var head = ['#', p.complete ? 'leaked' : 'in use', 'share', 'blocks', 'kind'];
    if (multi) head.push('device');
    head.push('innermost frames');
    return makeTable(p, rows, head, function (l, i) {
      var tds = [el('td', { 'class': 'num', text: String(i + 1) }),
        el('td', { 'class': 'num', text: bytesLong(l.bytes) }),
        el('td', { 'class': 'num', text: pct(l.bytes, total) }),
        el('td', { 'class': 'num', text: count(l.blocks) }),
        el('td', { text: l.kind })];
      if (multi) tds.push(el('td', { text: l.device }));
      tds.push(stackCell(p, l.stack, 4));
      return tds;
    }, p.complete ? 'No leaks: every block was freed.' : 'Nothing in use at the snapshot.');
  }

  function makeTable(p, rows, head, rowCells, emptyText) {
    var box = el('div');
    if (!rows.length) {
      box.appendChild(el('div', { 'class': 'empty', text: emptyText }));
      return box;
    }
    var table = el('table', { 'class': 'sites' });
    table.appendChild(el('tr', null, head.map(function (h) { return el('th', { text: h }); })));
    var shown = Math.min(TOP, rows.length);
    function fill() {
      while (table.rows.length > 1) table.deleteRow(1);
      rows.slice(0, shown).forEach(function (r, i) { table.appendChild(el('tr', null, rowCells(r, i))); });
    }
    fill();
    box.appendChild(table);
    if (rows.length > shown) {
      var more = el('button', { type: 'button', text: 'Show all ' + count(rows.length) });
      more.addEventListener('click', function () { shown = rows.length; fill(); more.remove(); });
      box.appendChild(el('div', { style: 'margin-top:6px' }, more));
    }
    return box;
  }

  function renderTables(sec, p) {
    sec.appendChild(el('h3', { text: 'Top allocation sites' }));
    if (p.stacks.sample_bytes)
      sec.appendChild(el('div', { 'class': 'note', text: 'Stacks were sampled: site figures are estimates for the whole run.' }));
    var tabs = el('div', { 'class': 'tabs', role: 'tablist' });
    var panes = el('div');
    var defs = [
      ['peak', 'by bytes at the peak', function () { return siteTable(p, 'bytes_at_peak'); }],
      ['leaked', p.complete ? 'leaked' : 'in use at the snapshot', function () { return leakTable(p); }],
      ['total', 'by bytes allocated', function () { return siteTable(p, 'total_bytes'); }],
      ['count', 'by allocations', function () { return siteTable(p, 'num_allocs'); }]
    ];
    var buttons = [];
    defs.forEach(function (d, i) {
      var pane = d[2]();
      pane.setAttribute('id', 'tfa-table-' + d[0]);
      pane.setAttribute('data-table', d[0]);
      pane.hidden = i !== 0;
      panes.appendChild(pane);
      var b = el('button', { type: 'button', role: 'tab', 'class': i === 0 ? 'on' : '', text: d[1] });
      b.addEventListener('click', function () {
        buttons.forEach(function (o, k) { o.className = k === i ? 'on' : ''; panes.children[k].hidden = k !== i; });
      });
      buttons.push(b);
      tabs.appendChild(b);
    });
    sec.appendChild(tabs);
    sec.appendChild(panes);
  }

  function renderErrors(sec, p) {
    if (!p.errors.length) return;
    sec.appendChild(el('h3', { text: 'Memory errors' }));
    var table = el('table', { 'class': 'sites', id: 'tfa-errors' });
    table.appendChild(el('tr', null, ['kind', 'address', 'times', 'detail', 'innermost frames of the call', 'allocated at']
      .map(function (h) { return el('th', { text: h }); })));
    p.errors.forEach(function (e) {
      table.appendChild(el('tr', null, [
        el('td', { text: e.kind.replace(/_/g, ' ') }), el('td', { 'class': 'mono', text: e.address }),
        el('td', { 'class': 'num', text: count(e.count) }), el('td', { text: e.detail }),
        stackCell(p, e.stack, 4), e.alloc_stack ? stackCell(p, e.alloc_stack, 3) : el('td')
      ]));
    });
    sec.appendChild(table);
    if (p.error_totals.not_recorded)
      sec.appendChild(el('div', { 'class': 'note', text: count(p.error_totals.not_recorded) + ' more not recorded.' }));
  }

  // ------------------------------------------------------------------
  // A process

  // Memory by container and resource (the control API, --tag-by thread), the largest peak first.
  function renderResources(sec, p) {
    sec.appendChild(el('h2', { text: 'Resources' }));
    sec.appendChild(el('p', { 'class': 'note', text: 'Memory charged to each resource of the control API (or to each thread with --tag-by thread), on every device.' }));
    var cols = [['resource', 'container/name'], ['type', 'type'], ['memory_used', 'in use'],
      ['peak_memory_used', 'peak'], ['num_allocs', 'allocations'], ['total_bytes', 'total allocated'],
      ['leaked_bytes', 'leaked'], ['bytes_limit', 'limit']];
    var t = el('table', { 'class': 'resources', id: 'tfa-resources' });
    t.appendChild(el('tr', null, cols.map(function (c) { return el('th', { text: c[1] }); })));
    p.resources.slice().sort(function (a, b) { return b.peak_memory_used - a.peak_memory_used; }).forEach(function (r) {
      t.appendChild(el('tr', null, cols.map(function (c) {
        var v = c[0] === 'resource' ? r.container + '/' + r.name + (r.state === 'deleted' ? ' (deleted)' : '') : r[c[0]];
        if (c[0] === 'bytes_limit' && !v) v = 'none';
        else if (c[0] === 'num_allocs') v = count(v);
        else if (typeof v === 'number') v = bytes(v);
        return el('td', { text: v });
      })));
    });
    sec.appendChild(t);
  }

  function renderProcess(view, p) {
    clear(view);
    var r = {};
    var head = el('section', { id: 'tfa-head' });
    view.appendChild(head);
    renderSummary(head, p);

    var tsec = el('section');
    view.appendChild(tsec);
    r.plot = renderTimeline(tsec, p);

    var d = primaryDevice(p);
    var peakNote = 'Bytes live at the moment of the peak' + (d ? ' (' + bytesLong(d.peak_bytes_in_use) + ')' : '') +
      ', by call stack: the outermost frame at the top, each frame as wide as the bytes allocated under it.' +
      (p.trimmed ? ' Frames outside main are left out.' : '') +
      (p.stacks.sample_bytes ? ' Estimated from sampled stacks.' : '');
    var fsec = el('section');
    view.appendChild(fsec);
    r.peak = renderFlame(fsec, p, 'Flame graph: bytes at the peak', peakNote, peakItems(p), {
      id: 'tfa-flame-peak', palette: 'peak', rootName: 'all', what: 'the peak',
      empty: 'Nothing was live at the peak.'
    });

    var lsec = el('section');
    view.appendChild(lsec);
    var leakTitle = p.complete ? 'Flame graph: leaks (bytes still allocated at exit)' : 'Flame graph: bytes in use at the snapshot';
    r.leaks = renderFlame(lsec, p, leakTitle,
      (p.complete ? 'Blocks never freed' : 'Blocks live when the snapshot was written') + ' (' +
        bytesLong(leakSums(p).bytes) + ' in ' + plural(leakSums(p).blocks, 'block', 'blocks') + '), by the stack that allocated them.', leakItems(p), {
        id: 'tfa-flame-leaks', palette: 'leak', rootName: p.complete ? 'leaked' : 'in use', what: p.complete ? 'the leaks' : 'the bytes in use',
        empty: p.complete ? 'No leaks: every block was freed.' : 'Nothing in use at the snapshot.'
      });

    var ssec = el('section');
    view.appendChild(ssec);
    renderTables(ssec, p);

    if (p.resources && p.resources.length) {
      var rsec = el('section');
      view.appendChild(rsec);
      renderResources(rsec, p);
    }

    var esec = el('section');
    view.appendChild(esec);
    renderErrors(esec, p);
    document.title = 'tfalloc: ' + (p.comm || p.command) + ' (' + p.pid + ')';
    return r;
  }

  // ------------------------------------------------------------------
  // The page

  function hashOptions() {
    var o = {};
    location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf('=');
      try {
        o[decodeURIComponent(i < 0 ? kv : kv.slice(0, i))] = i < 0 ? '' : decodeURIComponent(kv.slice(i + 1));
      } catch (e) { /* a malformed option is ignored */ }
    });
    return o;
  }

  function visibleNames(fg) {
    var out = [];
    var gs = fg.svg.querySelectorAll('g.frame');
    for (var i = 0; i < gs.length; i++) out.push(gs[i].getAttribute('data-name'));
    return out;
  }

  function frameWidth(fg, name) {
    var g = fg.find(name);
    return g ? Number(g.querySelector('rect').getAttribute('width')) : -1;
  }

  // #test-zoom=NAME: click NAME in the peak's flame graph, then the root, as a user would.
  function selfTest(rendered, name) {
    var out = el('div', { id: 'tfa-test', hidden: true, 'data-zoom': name });
    document.body.appendChild(out);
    var fg = rendered.peak;
    if (!fg) { out.setAttribute('data-error', 'no flame graph of the peak'); return; }
    var g = fg.find(name);
    if (!g) { out.setAttribute('data-error', 'no frame named ' + name); return; }
    out.setAttribute('data-before-width', frameWidth(fg, name));
    g.querySelector('rect').dispatchEvent(new MouseEvent('click', { bubbles: true }));
    out.setAttribute('data-graph-width', fg.width);
    out.setAttribute('data-zoomed', fg.holder.getAttribute('data-zoom'));
    out.setAttribute('data-zoom-width', frameWidth(fg, name));
    out.setAttribute('data-zoom-visible', JSON.stringify(visibleNames(fg)));
    var rootG = fg.svg.querySelector('g.frame[data-kind="root"]');
    rootG.querySelector('rect').dispatchEvent(new MouseEvent('click', { bubbles: true }));
    out.setAttribute('data-reset-zoomed', fg.holder.getAttribute('data-zoom'));
    out.setAttribute('data-reset-width', frameWidth(fg, name));
    out.setAttribute('data-reset-visible', JSON.stringify(visibleNames(fg)));
  }

  // The data's columns of sites made one object per site, and its tree of
  // stacks a list of frames per stack id, innermost first (tools/html.c).
  function unpack(p) {
    var c = p.sites, sites = [];
    for (var i = 0; i < c.stack.length; i++) {
      sites.push({ device: c.devices[c.device[i]], stack: c.stack[i], num_allocs: c.num_allocs[i],
                   total_bytes: c.total_bytes[i], bytes_in_use: c.bytes_in_use[i],
                   blocks_in_use: c.blocks_in_use[i], bytes_at_peak: c.bytes_at_peak[i] });
    }
    p.sites = sites;
    var nodes = p.stack_nodes, byId = {};
    for (var s = 0; s < p.stack_ids.length; s++) {
      var frames = [];
      for (var n = p.stack_leaves[s]; n !== 0; n = nodes[2 * (n - 1)]) frames.push(nodes[2 * (n - 1) + 1]);
      byId[String(p.stack_ids[s])] = frames;
    }
    p.stacks_by_id = byId;
  }

  function main() {
    var data = JSON.parse(document.getElementById('tfa-data').textContent);
    var app = document.getElementById('tfa-app');
    var opts = hashOptions();
    var procs = data.processes;
    procs.forEach(unpack);

    var header = el('header', { 'class': 'top' }, el('h1', { text: 'tfalloc memory report' }));
    app.appendChild(header);
    var body = el('main');
    app.appendChild(body);

    if (data.unreadable.length) {
      var ul = el('ul');
      data.unreadable.forEach(function (m) { ul.appendChild(el('li', { 'class': 'mono', text: m })); });
      body.appendChild(el('div', { 'class': 'warnbox', id: 'tfa-unreadable' }, [
        el('b', { text: plural(data.unreadable.length, 'file', 'files') + ' could not be read:' }), ul]));
    }
    if (data.symbols && data.symbols.length) {
      var sl = el('ul');
      data.symbols.forEach(function (m) { sl.appendChild(el('li', { 'class': 'mono', text: m })); });
      body.appendChild(el('div', { 'class': 'warnbox', id: 'tfa-symbols' }, [
        el('b', { text: 'Frames shown as file+offset: ' +
                        plural(data.symbols.length, 'file', 'files') + ' could not be symbolized as recorded:' }), sl]));
    }
    if (!procs.length) {
      body.appendChild(el('div', { 'class': 'empty', text: 'No profile to show.' }));
      return;
    }

    var view = el('div', { id: 'tfa-view' });
    var current = 0;
    for (var i = 0; i < procs.length; i++) if (String(procs[i].pid) === opts.process) { current = i; break; }
    if (procs.length > 1) {
      var sel = el('select', { id: 'tfa-process' });
      procs.forEach(function (p, k) {
        var cmd = p.command || p.comm || '';
        if (cmd.length > 90) cmd = cmd.slice(0, 89) + '…';
        sel.appendChild(el('option', { value: k, text: 'pid ' + p.pid + (p.complete ? '' : ' (snapshot)') + ': ' + cmd }));
      });
      sel.value = String(current);
      sel.addEventListener('change', function () { show(Number(sel.value)); });
      header.appendChild(el('label', { 'for': 'tfa-process', text: 'process (' + procs.length + '):' }));
      header.appendChild(sel);
    }
    header.appendChild(el('span', { 'class': 'gen', text: 'tfalloc ' + data.tfalloc_version }));
    body.appendChild(view);

    var rendered = null;
    function show(k) {
      current = k;
      rendered = renderProcess(view, procs[k]);
    }
    show(current);

    var timer = null;
    window.addEventListener('resize', function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        if (!rendered) return;
        if (rendered.plot) rendered.plot.draw();
        if (rendered.peak) rendered.peak.draw();
        if (rendered.leaks) rendered.leaks.draw();
      }, 150);
    });

    if (opts.search !== undefined) {
      if (rendered.peak) rendered.peak.highlight(opts.search);
      if (rendered.leaks) rendered.leaks.highlight(opts.search);
    }
    if (opts.zoom !== undefined && rendered.peak) {
      var z = rendered.peak.find(opts.zoom);
      if (z) rendered.peak.zoom(z.tfaNode);
    }
    if (opts['test-zoom'] !== undefined) selfTest(rendered, opts['test-zoom']);
  }

  try {
    main();
    if (!failed) {
      statusEl.setAttribute('data-ok', '1');
      statusEl.textContent = 'ready';
    }
  } catch (e) {
    fail(String(e && e.stack ? e.stack : e));
  }
})();
