// owl's web page: one page, hash routes (#/, #/path/NAME, #/flows/PATH,
// #/probe/ID), every number read from the collector's JSON endpoint
// (api/v1/METHOD: the QueryService's answers in protojson). The DOM
// contract the browser test relies on is in docs/web.md.
'use strict';

(function () {
  const view = document.getElementById('view');
  const banner = document.getElementById('banner');
  const crumbs = document.getElementById('crumbs');
  const live = document.getElementById('live');

  const POLL_MS = 2000;
  const RANGES = { '5m': 300, '1h': 3600, '6h': 21600 };
  const DEFAULT_RANGE = '1h';
  const KINDS = ['tcp-data', 'tcp-handshake', 'dns'];
  const TABLE_ROWS = 100; // per-epoch table rows listed before asking
  const CDF_POINTS = 200;

  let gen = 0; // counts routes: an answer for an older one is dropped
  let routeNote = ''; // what the banner says about the route itself
  let cleanups = []; // what the current view started: timers, charts, listeners

  // ---- the JSON endpoint ----

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, req) {
    let res;
    try {
      res = await fetch('api/v1/' + method, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(req || {}),
      });
    } catch (e) {
      throw new APIError(0, 'Unavailable', 'the collector did not answer (' + e.message + ')');
    }
    let body;
    try {
      body = await res.json();
    } catch (e) {
      throw new APIError(res.status, 'Unknown', 'HTTP ' + res.status + ' with no JSON body');
    }
    if (!res.ok) throw new APIError(res.status, body.code || 'Unknown', body.message || res.statusText);
    return body;
  }

  // settle turns a failed call into its error, so that one failure does not
  // hide the answers of the others.
  function settle(p) {
    return p.catch((e) => (e instanceof Error ? e : new Error(String(e))));
  }

  function explain(err, what) {
    if (!(err instanceof APIError)) return what + ': ' + err.message;
    switch (err.code) {
      case 'InvalidArgument':
        return what + ': parameters rejected: ' + err.message;
      case 'NotFound':
        return what + ': not found: ' + err.message;
      case 'Unavailable':
        return what + ': unavailable: ' + err.message;
      case 'Unauthenticated':
      case 'PermissionDenied':
        return what + ': refused: ' + err.message;
    }
    return what + ': ' + err.code + ' (HTTP ' + err.status + '): ' + err.message;
  }

  // ---- formatting ----

  // fixed formats x with d decimals and thousands separators (toFixed is
  // several times faster than Intl for the thousands of cells of a table).
  function fixed(x, d) {
    const s = x.toFixed(d), dot = s.indexOf('.'), neg = s[0] === '-' ? 1 : 0;
    let i = dot < 0 ? s.length : dot, out = s.slice(i);
    while (i - 3 > neg) {
      out = ',' + s.slice(i - 3, i) + out;
      i -= 3;
    }
    return s.slice(0, i) + out;
  }
  function num(v) {
    return v === undefined || v === null || v === '' ? null : Number(v);
  }
  function esc(s) {
    return String(s === undefined || s === null ? '' : s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  }
  // us formats nanoseconds as microseconds, with about four significant digits.
  function us(ns) {
    const v = num(ns);
    if (v === null || !isFinite(v)) return '—';
    const x = v / 1000, a = Math.abs(x);
    return fixed(x, a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : 3);
  }
  function count(v) {
    v = num(v);
    if (v === null || !isFinite(v)) return '—';
    if (Number.isInteger(v)) return fixed(v, 0);
    return fixed(v, Math.abs(v) < 10 ? 2 : Math.abs(v) < 100 ? 1 : 0);
  }
  function pct(part, whole) {
    part = num(part) || 0;
    whole = num(whole) || 0;
    if (whole <= 0) return '—';
    const p = (100 * part) / whole;
    return fixed(p, p === 0 ? 0 : p < 0.1 ? 3 : 2) + '%';
  }
  // utc shows a protojson timestamp (RFC 3339, UTC) to the second.
  function utc(ts) {
    if (!ts) return '—';
    const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?Z$/.exec(ts);
    return m ? m[1] + ' ' + m[2] + 'Z' : String(ts);
  }
  function seconds(duration) {
    // protojson Durations are "1s", "0.500s".
    const v = parseFloat(duration || '0');
    return isFinite(v) ? v : 0;
  }
  const PROTOCOLS = { 1: 'icmp', 6: 'tcp', 17: 'udp', 58: 'icmpv6', 132: 'sctp' };
  function flowKey(f) {
    f = f || {};
    return [f.src || '', f.src_port || 0, f.dst || '', f.dst_port || 0, f.protocol || 0].join(' ');
  }
  function flowText(f) {
    f = f || {};
    const host = (a, p) => (String(a || '').includes(':') ? '[' + (a || '') + ']' : a || '?') + ':' + (p || 0);
    return (PROTOCOLS[f.protocol] || 'proto ' + (f.protocol || 0)) + ' ' + host(f.src, f.src_port) + ' → ' + host(f.dst, f.dst_port);
  }

  // ---- results ----

  const STATUS = {
    RESULT_STATUS_OK: ['ok', 'ok'],
    RESULT_STATUS_PARTIAL: ['partial', 'warn'],
    RESULT_STATUS_NO_SAMPLES: ['no samples', 'warn'],
    RESULT_STATUS_MISSING_UPSTREAM: ['upstream missing', 'bad'],
    RESULT_STATUS_MISSING_DOWNSTREAM: ['downstream missing', 'bad'],
    RESULT_STATUS_MISMATCH: ['parameter mismatch', 'bad'],
    RESULT_STATUS_UNSPECIFIED: ['unspecified', 'muted'],
  };
  // Statuses with an estimate of the delay, and those where both sides came.
  const ESTIMATED = new Set(['RESULT_STATUS_OK', 'RESULT_STATUS_PARTIAL']);
  const BOTH_SIDES = new Set(['RESULT_STATUS_OK', 'RESULT_STATUS_PARTIAL', 'RESULT_STATUS_NO_SAMPLES']);

  function statusOf(r) {
    return r.status || 'RESULT_STATUS_UNSPECIFIED';
  }
  function statusCell(r) {
    const st = statusOf(r), [text, cls] = STATUS[st] || [st, 'muted'];
    return '<span class="' + cls + '" title="' + esc(r.detail || st) + '">' + esc(text) + '</span>';
  }
  // quantileOf is the q-quantile of a result's delays, or null when it has
  // none (no sampling).
  function quantileOf(r, q) {
    for (const x of r.quantiles || []) if (Math.abs((x.q || 0) - q) < 1e-9) return num(x.value_ns) || 0;
    return null;
  }
  function clockCell(r) {
    if (r.clock_flagged) return '<span class="warn" title="' + esc(r.clock_note || 'clock flagged') + '">⚠ flagged</span>';
    const u = num(r.clock_uncertainty_ns);
    return '<span class="ok" title="' + esc(r.clock_note || 'clocks within their bound') + '">ok' + (u ? ' ±' + us(u) + ' µs' : '') + '</span>';
  }
  const CLOCK_STATES = {
    CLOCK_STATE_SYNCHRONIZED: ['synchronized', 'ok'],
    CLOCK_STATE_HOLDOVER: ['holdover', 'warn'],
    CLOCK_STATE_ACQUIRING: ['acquiring', 'warn'],
    CLOCK_STATE_UNSYNCHRONIZED: ['unsynchronized', 'bad'],
    CLOCK_STATE_UNSPECIFIED: ['no state', 'muted'],
  };
  function probeClock(c) {
    if (!c) return '<span class="muted">—</span>';
    const st = c.state || 'CLOCK_STATE_UNSPECIFIED';
    if (st === 'CLOCK_STATE_UNSPECIFIED') return esc(c.source || '?') + ' <span class="muted">' + esc(c.detail || 'no clock state') + '</span>';
    const [text, cls] = CLOCK_STATES[st] || [st, 'muted'];
    const title = [c.reference, c.detail].filter(Boolean).join(': ');
    return esc(c.source || '?') + ' <span class="' + cls + '" title="' + esc(title) + '">' + esc(text) + '</span>' +
      ' offset ' + us(c.offset_ns || 0) + ' µs ±' + us(c.uncertainty_ns || 0) + ' µs' + (c.corrected ? ' (corrected)' : '');
  }

  // ---- page frame ----

  function setBanner(msg, isError) {
    msg = [routeNote, msg].filter(Boolean).join('; ');
    banner.hidden = !msg;
    banner.className = isError ? 'error' : '';
    banner.textContent = msg || '';
  }
  function box(msg, isError) {
    return '<div class="empty' + (isError ? ' error' : '') + '">' + esc(msg) + '</div>';
  }
  function link(hash, text) {
    return '<a href="' + esc(hash) + '">' + esc(text) + '</a>';
  }
  function enc(s) {
    return encodeURIComponent(s);
  }
  function setCrumbs(r) {
    const parts = [link('#/', 'overview')];
    if (r.view === 'path') parts.push('path ' + esc(r.arg), link('#/flows/' + enc(r.arg), 'its flows'));
    if (r.view === 'flows') parts.push('flows of ' + link('#/path/' + enc(r.arg), r.arg));
    if (r.view === 'probe') parts.push('probe ' + esc(r.arg));
    crumbs.innerHTML = parts.join(' › ');
  }

  // done marks the view's first data as rendered (the browser test waits
  // for it) and times the page's first render.
  function done(g) {
    if (g !== gen) return;
    view.dataset.ready = '1';
    if (window.owlFirstRenderMS === undefined) window.owlFirstRenderMS = performance.now();
  }

  function parseRoute() {
    let s = location.hash.replace(/^#\/?/, ''), qs = '';
    const i = s.indexOf('?');
    if (i >= 0) {
      qs = s.slice(i + 1);
      s = s.slice(0, i);
    }
    let parts;
    try {
      parts = s.split('/').filter((x) => x !== '').map(decodeURIComponent);
    } catch (e) {
      parts = ['?'];
    }
    const params = new URLSearchParams(qs);
    const [kind, ...rest] = parts, arg = rest.join('/');
    if (parts.length === 0) return { view: 'overview', params };
    if ((kind === 'path' || kind === 'flows' || kind === 'probe') && arg) return { view: kind, arg, params };
    return { view: 'overview', params, unknown: s };
  }

  function route() {
    const g = ++gen;
    for (const f of cleanups.splice(0)) f();
    const r = parseRoute();
    window.owlSeries = undefined;
    window.owlCDF = undefined;
    window.owlRTTCDF = undefined;
    view.dataset.view = r.view;
    view.dataset.ready = '0';
    view.innerHTML = '<p class="muted">loading…</p>';
    widthNow = 0;
    live.textContent = '';
    routeNote = r.unknown ? 'no page #/' + r.unknown + ': showing the overview' : '';
    setBanner(null);
    setCrumbs(r);
    VIEWS[r.view](r, g).catch((err) => {
      if (g !== gen) return;
      view.innerHTML = box(explain(err, r.view + ' ' + (r.arg || '')), true);
      done(g);
    });
  }

  // ---- charts ----

  // chartWidth is the charts' width, measured once per view and resize
  // (measuring forces a layout: done before the tables come, it is cheap).
  let widthNow = 0;
  function chartWidth() {
    return widthNow || (widthNow = Math.max(320, Math.min(1500, view.clientWidth - 32)));
  }
  window.addEventListener('resize', () => {
    widthNow = 0;
  });
  const utcDate = (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC');

  // chart draws a uPlot chart into el, at most maxWidth wide, and has it
  // destroyed and resized with the view.
  function chart(el, opts, data, maxWidth) {
    const width = () => Math.min(chartWidth(), maxWidth || Infinity);
    const u = new uPlot(Object.assign({ width: width(), height: 220 }, opts), data, el);
    const onResize = () => u.setSize({ width: width(), height: u.height });
    window.addEventListener('resize', onResize);
    const dispose = () => {
      window.removeEventListener('resize', onResize);
      u.destroy();
      disposers.delete(u);
    };
    disposers.set(u, dispose);
    cleanups.push(() => dropChart(u));
    return u;
  }
  const disposers = new Map(); // chart → what destroys it
  // dropChart destroys a chart before its view ends (again: nothing).
  function dropChart(u) {
    const dispose = disposers.get(u);
    if (dispose) dispose();
  }
  function line(label, color, fmt) {
    return { label, stroke: color, width: 1, value: (u, v) => (v === null || v === undefined ? '—' : fmt(v)) };
  }
  // timeSeries is a time chart's x series: the legend shows the time in
  // UTC.
  function timeSeries() {
    return { label: 'UTC', value: (u, v) => (v === null || v === undefined ? '—' : new Date(v * 1000).toISOString().slice(0, 19).replace('T', ' ')) };
  }
  // timeAxis labels a time axis in UTC for 1 s epochs over seconds to
  // days: ticks on whole seconds at least and 80 px apart (a label
  // "18:10:30" is about 55 px wide), labelled by the step between them
  // (HH:MM:SS under a minute, HH:MM under a day, the date above), with the
  // date under the first tick and under each tick on a new day, so no two
  // labels read the same.
  function timeAxis() {
    return {
      space: 80,
      incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800],
      values: (u, ticks, i, space, incr) => {
        let day = '';
        return ticks.map((v) => {
          const iso = new Date(v * 1000).toISOString();
          if (incr >= 86400) return iso.slice(0, 10);
          const label = incr >= 60 ? iso.slice(11, 16) : iso.slice(11, 19);
          const d = iso.slice(0, 10);
          if (d === day) return label;
          day = d;
          return label + '\n' + d;
        });
      },
    };
  }
  // timePadding leaves room right of a time chart for its last tick's
  // label, which uPlot centres on the plot's edge.
  const timePadding = [null, 32, null, null];
  const COLORS = { blue: '#0a58ca', purple: '#8250df', red: '#cf222e', green: '#1a7f37', orange: '#bc4c00' };

  // ---- views ----

  const VIEWS = { overview, path: pathView, flows: flowsView, probe: probeView };

  // overview polls the paths' latest results, the probes and the cluster.
  async function overview(r, g) {
    view.innerHTML =
      '<h2>Paths <small>latest epoch of each; every ' + POLL_MS / 1000 + ' s</small></h2><div id="paths-box"></div>' +
      '<h2>Probes</h2><div id="probes-box"></div>' +
      '<h2>Collectors <small>the cluster\'s members and what each owns</small></h2><div id="members-box"></div>';
    let timer;
    cleanups.push(() => clearTimeout(timer));
    const load = async () => {
      const data = await overviewData();
      if (g !== gen) return;
      renderOverview(data);
      live.textContent = 'updated ' + new Date().toISOString().slice(11, 19) + 'Z';
      done(g);
      timer = setTimeout(load, POLL_MS);
    };
    await load();
  }

  // overviewData asks for the paths, probes and members, and for each path
  // its latest result alone (limit 1: the newest).
  async function overviewData() {
    const probesP = settle(api('ListProbes', {}));
    const membersP = settle(api('ListCollectors', {}));
    const paths = await settle(api('ListPaths', {}));
    let latest = [];
    if (!(paths instanceof Error)) {
      latest = await Promise.all((paths.paths || []).map((p) => settle(api('GetPathStats', { path: p.name, limit: 1 }))));
    }
    return { paths, latest, probes: await probesP, members: await membersP };
  }

  function renderOverview(d) {
    const banners = [];
    if (!(d.probes instanceof Error)) {
      if (d.probes.warning) banners.push(d.probes.warning);
      if (d.probes.note) banners.push(d.probes.note);
    }
    setBanner(banners.join('; '));
    const byId = {};
    if (!(d.probes instanceof Error)) for (const p of d.probes.probes || []) byId[p.probe_id] = p;
    document.getElementById('paths-box').innerHTML =
      d.paths instanceof Error ? box(explain(d.paths, 'paths'), true) : pathsTable(d.paths.paths || [], d.latest, byId);
    document.getElementById('probes-box').innerHTML =
      d.probes instanceof Error ? box(explain(d.probes, 'probes'), true) : probesTable(d.probes.probes || []);
    document.getElementById('members-box').innerHTML =
      d.members instanceof Error ? box(explain(d.members, 'collectors'), true) : membersTable(d.members.collectors || []);
  }

  // whyNoResult says why a path has no result yet, from its probes' state.
  function whyNoResult(p, byId) {
    const missing = [];
    for (const [role, id] of [['upstream', p.upstream], ['downstream', p.downstream]]) {
      const pr = byId[id];
      if (!pr) missing.push(role + ' probe ' + id + ' has never connected');
      else if (pr.error) missing.push(role + ' probe ' + id + ' was rejected: ' + pr.error);
      else if (!pr.connected) missing.push(role + ' probe ' + id + ' is not connected');
    }
    if (missing.length) return 'no result yet: ' + missing.join('; ');
    return 'no result yet: both probes are connected; a result comes once an epoch has closed and both sides of it are in';
  }

  const PATH_FIELDS = ['epoch', 'status', 'mean_ns', 'p99_ns', 'lost', 'samples', 'estimator'];

  function pathsTable(paths, latest, byId) {
    if (!paths.length) return box('No path is configured on this collector (paths: in its configuration); it may serve COLATE queries only.');
    const rows = paths.map((p, i) => pathRow(p, latest[i], byId));
    return '<div class="wide"><table id="paths"><thead><tr><th>path</th><th>upstream → downstream</th><th class="num">epoch</th><th>time (UTC)</th>' +
      '<th>status</th><th class="num">mean µs</th><th class="num">p99 µs</th><th class="num">stddev µs</th><th class="num">lost</th>' +
      '<th class="num">loss</th><th class="num">samples</th><th>estimator</th><th>clock</th><th class="note">note</th></tr></thead><tbody>' +
      rows.join('') + '</tbody></table></div>';
  }

  // pathRow is a path's row: cells data-field/data-value hold the API's raw
  // values of the latest epoch (empty when there is none).
  function pathRow(p, ans, byId) {
    const r = ans instanceof Error ? null : (ans.stats || [])[(ans.stats || []).length - 1];
    const cell = (f, text, cls) => {
      const raw = r ? rawField(r, f) : '';
      return '<td data-field="' + f + '" data-value="' + esc(raw) + '"' + (cls ? ' class="' + cls + '"' : '') + '>' + text + '</td>';
    };
    const name = '<td>' + link('#/path/' + enc(p.name), p.name) + ' <small>' + link('#/flows/' + enc(p.name), 'flows') + '</small></td><td class="wrap">' +
      link('#/probe/' + enc(p.upstream), p.upstream) + ' → ' + link('#/probe/' + enc(p.downstream), p.downstream) + '</td>';
    if (!r) {
      const why = ans instanceof Error ? explain(ans, 'latest result') : whyNoResult(p, byId);
      const blank = PATH_FIELDS.map((f) => cell(f, '—', f === 'estimator' || f === 'status' ? '' : 'num'));
      return '<tr data-path="' + esc(p.name) + '">' + name + blank[0] + '<td>—</td>' + blank[1] + blank[2] + blank[3] + '<td class="num">—</td>' + blank[4] +
        '<td class="num">—</td>' + blank[5] + blank[6] + '<td></td><td class="wrap ' + (ans instanceof Error ? 'bad' : 'warn') + '">' + esc(why) + '</td></tr>';
    }
    const est = ESTIMATED.has(statusOf(r)), p99 = quantileOf(r, 0.99);
    const note = r.detail || r.sample_note || '';
    return '<tr data-path="' + esc(p.name) + '">' + name +
      cell('epoch', esc(r.epoch || 0), 'num') + '<td title="' + esc(utc(r.start)) + '">' + esc(utc(r.start).slice(11)) + '</td>' + cell('status', statusCell(r)) +
      cell('mean_ns', est ? us(r.mean_ns) : '—', 'num') + cell('p99_ns', p99 === null ? '—' : us(p99), 'num') +
      '<td class="num">' + (est ? us(r.stddev_ns) : '—') + '</td>' + cell('lost', count(r.lost || 0), 'num') +
      '<td class="num">' + pct(r.lost, r.upstream_packets) + '</td>' + cell('samples', count(r.samples || 0), 'num') +
      cell('estimator', esc(r.estimator || '—')) + '<td>' + clockCell(r) + '</td>' +
      '<td class="muted note" title="' + esc(note) + '">' + esc(note) + '</td></tr>';
  }

  // rawField is the API's value of a field as protojson gives it (64-bit
  // integers as strings), with proto3's default where protojson leaves it
  // out; p99_ns is the 0.99 quantile's value_ns, empty when there is none.
  function rawField(r, f) {
    if (f === 'p99_ns') {
      const q = (r.quantiles || []).find((x) => Math.abs((x.q || 0) - 0.99) < 1e-9);
      return q ? String(q.value_ns === undefined ? 0 : q.value_ns) : '';
    }
    if (f === 'status') return statusOf(r);
    if (f === 'estimator') return r.estimator || '';
    return String(r[f] === undefined ? 0 : r[f]);
  }

  function probesTable(probes) {
    if (!probes.length) return box('No probe has connected to this collector yet: start probes with -collector pointing at its gRPC address (and their certificates, unless it runs -insecure).');
    const rows = probes.map((p) => {
      const state = p.error ? '<span class="bad">rejected</span>' : p.connected ? '<span class="ok">connected</span>' : '<span class="warn">disconnected</span>';
      return '<tr data-probe="' + esc(p.probe_id) + '"><td>' + link('#/probe/' + enc(p.probe_id), p.probe_id) + '</td><td>' + state + '</td><td>' + probeClock(p.clock) +
        '</td><td class="num">' + count(p.reports || 0) + '</td><td class="num">' + count(p.refused || 0) + '</td><td>' + esc(utc(p.last_seen)) + '</td><td>' +
        esc(p.address || '') + '</td><td>' + esc(p.version || '') + '</td><td class="bad">' + esc(p.error || '') + '</td></tr>';
    });
    return '<table id="probes"><thead><tr><th>probe</th><th>state</th><th>clock</th><th class="num">reports</th><th class="num">refused</th><th>last seen (UTC)</th>' +
      '<th>address</th><th>version</th><th>error</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>';
  }

  function membersTable(members) {
    if (!members.length) return box('The collector lists no member: it answers for itself only.');
    const rows = members.map((m) => {
      const cls = m.state === 'alive' || !m.state ? 'ok' : m.state === 'suspect' ? 'warn' : 'bad';
      const owns = (m.paths || []).map((p) => link('#/path/' + enc(p), p)).join(', ') + (m.colate ? ' <span class="tag">COLATE, RTT, reordering</span>' : '');
      return '<tr data-member="' + esc(m.name) + '"><td>' + esc(m.name) + (m.self ? ' <span class="tag">this one</span>' : '') + '</td><td class="' + cls + '">' +
        esc(m.state || 'alive') + '</td><td>' + esc(m.grpc_address || '') + '</td><td>' + esc(m.gossip_address || '—') + '</td><td>' + (owns || '<span class="muted">nothing</span>') + '</td></tr>';
    });
    return '<table id="members"><thead><tr><th>collector</th><th>state</th><th>gRPC</th><th>gossip</th><th>owns</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>';
  }

  // ---- one path ----

  // rangeOf turns the route's from/to (RFC3339) into a request's, or
  // anchors range (5m, 1h, 6h) at the path's latest epoch.
  async function rangeOf(r, path) {
    const from = r.params.get('from'), to = r.params.get('to');
    if (from || to) return { from: from || undefined, to: to || undefined, label: (from || '…') + ' to ' + (to || '…') };
    const key = RANGES[r.params.get('range')] ? r.params.get('range') : DEFAULT_RANGE;
    const latest = await api('GetPathStats', { path, limit: 1 });
    const last = (latest.stats || [])[0];
    if (!last) return { none: true, key };
    const startMS = Date.parse(last.start), lenMS = seconds(last.length) * 1000;
    return {
      key,
      from: new Date(startMS - RANGES[key] * 1000 + lenMS).toISOString(),
      to: new Date(startMS).toISOString(),
      label: 'last ' + key + ' up to the latest epoch',
    };
  }

  function rangePicker(hashBase, rg) {
    const links = Object.keys(RANGES).map((k) => '<a class="' + (rg.key === k ? 'on' : '') + '" href="' + esc(hashBase + '?range=' + k) + '">last ' + k + '</a>');
    return '<div class="ranges">range: ' + links.join('') +
      '<form class="inline" id="range-form"><label>from (RFC3339)<input name="from" class="wide" value="' + esc(rg.from || '') + '"></label>' +
      '<label>to<input name="to" class="wide" value="' + esc(rg.to || '') + '"></label><button>show</button></form></div>';
  }
  function bindRangeForm(hashBase) {
    const f = document.getElementById('range-form');
    if (!f) return;
    f.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const k of ['from', 'to']) if (f.elements[k].value.trim()) q.set(k, f.elements[k].value.trim());
      location.hash = hashBase + '?' + q.toString();
    });
  }

  async function pathView(r, g) {
    const path = r.arg, base = '#/path/' + enc(path);
    const [paths, rg] = await Promise.all([api('ListPaths', {}), rangeOf(r, path)]);
    if (g !== gen) return;
    const cfg = (paths.paths || []).find((p) => p.name === path);
    let head = '<h2>Path ' + esc(path) + (cfg ? ' <small>' + link('#/probe/' + enc(cfg.upstream), cfg.upstream) + ' → ' + link('#/probe/' + enc(cfg.downstream), cfg.downstream) + '</small>' : '') + '</h2>';
    head += rangePicker(base, rg);
    if (rg.none) {
      const probes = await api('ListProbes', {});
      const byId = Object.fromEntries((probes.probes || []).map((p) => [p.probe_id, p]));
      view.innerHTML = head + box(cfg ? whyNoResult(cfg, byId) : 'path ' + path + ' has no result');
      bindRangeForm(base);
      return done(g);
    }
    const ans = await api('GetPathStats', { path, from: rg.from, to: rg.to, limit: 100000 });
    if (g !== gen) return;
    const stats = ans.stats || [];
    // The distribution is asked for at once: the collector merges the
    // sketches while the page draws the rest.
    const dist = settle(api('GetPathDelayDistribution', distributionRequest(path, rg, stats)));
    const s = seriesOf(stats);
    window.owlSeries = s.series;
    view.innerHTML = head + (ans.note ? box(ans.note) : '') + '<p class="muted">' + esc(rg.label) + ': ' + count(stats.length) + ' epochs. Drag on a chart to zoom, double-click to zoom out.</p>' +
      '<div id="charts"></div><h2>Delay distribution over the range <small>GetPathDelayDistribution</small></h2><div class="row"><div id="cdf"></div><div id="quantiles"></div></div>' +
      '<h2>Epochs <small id="epochs-note"></small></h2><div id="epochs"></div>';
    bindRangeForm(base);
    chartWidth();
    if (stats.length) drawPathCharts(s, stats);
    else document.getElementById('charts').innerHTML = box('no result of ' + path + ' in this range: pick a longer range, or see the overview for the probes\' state');
    renderEpochs(stats, s.t, -Infinity, Infinity);
    const d = await dist;
    if (g !== gen) return;
    drawDelayCDF(d);
    done(g);
  }

  // seriesOf is the path view's series, one entry per result, in epoch
  // order: null where the result has no such value (no estimate without
  // both sides, no quantiles without sampling).
  function seriesOf(stats) {
    const s = { epoch: [], mean_ns: [], p50_ns: [], p99_ns: [], stddev_ns: [], lost: [], reordered: [] };
    const t = [];
    for (const r of stats) {
      const st = statusOf(r), est = ESTIMATED.has(st), both = BOTH_SIDES.has(st);
      s.epoch.push(Number(r.epoch || 0));
      s.mean_ns.push(est ? num(r.mean_ns) || 0 : null);
      s.stddev_ns.push(est ? num(r.stddev_ns) || 0 : null);
      s.p50_ns.push(quantileOf(r, 0.5));
      s.p99_ns.push(quantileOf(r, 0.99));
      s.lost.push(both ? num(r.lost) || 0 : null);
      s.reordered.push(both ? num(r.reordered) || 0 : null);
      t.push(Date.parse(r.start) / 1000);
    }
    return { series: s, t };
  }

  function drawPathCharts(s, stats) {
    const el = document.getElementById('charts');
    el.innerHTML = '<div class="chart" id="c-delay"></div><div class="chart" id="c-stddev"></div><div class="chart" id="c-loss"></div>';
    const toUS = (a) => a.map((v) => (v === null ? null : v / 1000));
    const fmtUS = (v) => us(v * 1000) + ' µs';
    const group = [];
    let syncing = false, pending = 0, listedAll = true;
    cleanups.push(() => cancelAnimationFrame(pending));
    const onScale = (u, key) => {
      if (key !== 'x' || syncing || group.length < 3) return;
      syncing = true;
      const { min, max } = u.scales.x;
      for (const o of group) if (o !== u) o.setScale('x', { min, max });
      syncing = false;
      const all = min <= s.t[0] && max >= s.t[s.t.length - 1];
      if (all && listedAll) return; // the table lists every epoch already
      listedAll = all;
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(() => renderEpochs(stats, s.t, min, max));
    };
    const base = (title) => ({
      title,
      tzDate: utcDate,
      padding: timePadding,
      axes: [timeAxis(), {}],
      cursor: { drag: { x: true, y: false }, sync: { key: 'owl-path' } },
      hooks: { setScale: [onScale] },
    });
    const ser = s.series;
    group.push(chart(document.getElementById('c-delay'), Object.assign(base('one-way delay (µs, UTC)'), {
      series: [timeSeries(), line('mean', COLORS.blue, fmtUS), line('p50', COLORS.green, fmtUS), line('p99', COLORS.red, fmtUS)],
    }), [s.t, toUS(ser.mean_ns), toUS(ser.p50_ns), toUS(ser.p99_ns)]));
    group.push(chart(document.getElementById('c-stddev'), Object.assign(base('standard deviation (µs)'), {
      height: 160, series: [timeSeries(), line('stddev', COLORS.purple, fmtUS)],
    }), [s.t, toUS(ser.stddev_ns)]));
    group.push(chart(document.getElementById('c-loss'), Object.assign(base('lost and reordered packets per epoch'), {
      height: 160, series: [timeSeries(), line('lost', COLORS.red, count), line('reordered', COLORS.orange, count)],
    }), [s.t, ser.lost, ser.reordered]));
  }

  // renderEpochs lists the results whose start is in [min, max] (the
  // charts' zoom), newest first: the newest TABLE_ROWS of them, or all
  // once asked (a table of thousands of rows takes the browser longer to
  // build and lay out than the rest of the view).
  function renderEpochs(stats, t, min, max) {
    const el = document.getElementById('epochs');
    const rows = [];
    let inView = 0;
    for (let i = stats.length - 1; i >= 0; i--) {
      if (t[i] < min || t[i] > max) continue;
      inView++;
      if (el.dataset.all === '1' || rows.length < TABLE_ROWS) rows.push(epochRow(stats[i]));
    }
    document.getElementById('epochs-note').textContent = inView + ' in view, newest first';
    if (!rows.length) {
      el.innerHTML = box('no epoch in view');
      return;
    }
    el.innerHTML = '<div class="scroll"><table id="epoch-table"><thead><tr><th class="num">epoch</th><th>start (UTC)</th><th>status</th>' +
      '<th class="num">mean µs</th><th class="num">stddev µs</th><th class="num">p50 µs</th><th class="num">p99 µs</th><th class="num">lost</th><th class="num">reordered</th>' +
      '<th class="num">samples</th><th class="num">up pkts</th><th class="num">down pkts</th><th>estimator</th><th>clock</th><th>detail</th></tr></thead><tbody>' +
      rows.join('') + '</tbody></table></div>' + (rows.length < inView ? '<p><button id="show-epochs">show all ' + count(inView) + ' (the newest ' + rows.length + ' are listed)</button></p>' : '');
    const more = document.getElementById('show-epochs');
    if (more) {
      more.addEventListener('click', () => {
        el.dataset.all = '1';
        renderEpochs(stats, t, min, max);
      });
    }
  }

  function epochRow(r) {
    const est = ESTIMATED.has(statusOf(r)), both = BOTH_SIDES.has(statusOf(r));
    const q = (x) => {
      const v = quantileOf(r, x);
      return v === null ? '—' : us(v);
    };
    return '<tr data-epoch="' + esc(r.epoch || 0) + '"><td class="num">' + esc(r.epoch || 0) + '</td><td>' + esc(utc(r.start)) + '</td><td>' + statusCell(r) +
      '</td><td class="num">' + (est ? us(r.mean_ns) : '—') + '</td><td class="num">' + (est ? us(r.stddev_ns) : '—') + '</td><td class="num">' + q(0.5) +
      '</td><td class="num">' + q(0.99) + '</td><td class="num">' + (both ? count(r.lost || 0) : '—') + '</td><td class="num">' + (both ? count(r.reordered || 0) : '—') +
      '</td><td class="num">' + count(r.samples || 0) + '</td><td class="num">' + count(r.upstream_packets || 0) + '</td><td class="num">' + count(r.downstream_packets || 0) +
      '</td><td>' + esc(r.estimator || '') + '</td><td>' + clockCell(r) + '</td><td class="muted wrap">' + esc(r.detail || '') + '</td></tr>';
  }

  // cdfGrid spreads n points over [lo, hi], widened by 2% so that the last
  // point is past every sketched value (the sketch is within 1%).
  function cdfGrid(lo, hi, n, log) {
    const pad = Math.max(1, 0.02 * Math.max(Math.abs(lo), Math.abs(hi)));
    if (log) {
      const a = Math.max(1, lo * 0.98), b = Math.max(a * 1.01, hi * 1.02 + 1);
      return Array.from({ length: n }, (_, i) => a * Math.pow(b / a, i / (n - 1)));
    }
    const a = lo - pad, b = hi + pad;
    return Array.from({ length: n }, (_, i) => a + ((b - a) * i) / (n - 1));
  }

  // logScale says whether delays from lo to hi read better on a log axis:
  // positive, over more than a decade and a half.
  function logScale(lo, hi) {
    return lo > 0 && hi / lo > 30;
  }

  // distributionRequest asks for the delay distribution over the range,
  // its CDF at points spread between the smallest and largest sampled
  // delay of the results.
  function distributionRequest(path, rg, stats) {
    let lo = Infinity, hi = -Infinity;
    for (const r of stats) {
      if (!(num(r.sample_delays) > 0)) continue;
      lo = Math.min(lo, num(r.delay_min_ns) || 0);
      hi = Math.max(hi, num(r.delay_max_ns) || 0);
    }
    const req = { path, from: rg.from, to: rg.to };
    if (isFinite(lo)) req.cdf_at_ns = cdfGrid(lo, hi, CDF_POINTS, logScale(lo, hi));
    return req;
  }

  function drawDelayCDF(d) {
    if (d instanceof Error) {
      document.getElementById('cdf').innerHTML = box(explain(d, 'delay distribution'), true);
      return;
    }
    const pts = (d.cdf || []).map((p) => [num(p.at_ns) || 0, num(p.fraction) || 0]);
    const log = pts.length > 1 && logScale(pts[0][0], pts[pts.length - 1][0]);
    window.owlCDF = pts;
    document.getElementById('quantiles').innerHTML = distributionSummary(d, count(d.sketched_epochs || 0) + ' of ' + count(d.epochs || 0) + ' epochs sketched');
    if (!pts.length) {
      document.getElementById('cdf').innerHTML = box(d.note || 'no delay distribution: no epoch of the range has sampled delays (percentiles need the probes\' consistent sample, params.sample)');
      return;
    }
    chart(document.getElementById('cdf'), {
      title: 'CDF of the one-way delay (µs' + (log ? ', log' : '') + ')', height: 260,
      scales: { x: { time: false, distr: log ? 3 : 1 } }, cursor: { drag: { x: true, y: false } },
      series: [{ label: 'µs', value: (u, v) => (v === null ? '—' : us(v * 1000)) }, line('fraction', COLORS.blue, (v) => fixed(v, 4))],
    }, [pts.map((p) => p[0] / 1000), pts.map((p) => p[1])], 720);
  }

  // distributionSummary lists a distribution answer's quantiles, count and
  // note.
  function distributionSummary(d, what) {
    const rows = (d.quantiles || []).map((q) => '<tr><td class="num">p' + esc(String(Math.round((q.q || 0) * 1e4) / 100)) + '</td><td class="num">' + us(q.value_ns) +
      '</td><td class="num">' + us(q.lo_ns) + ' – ' + us(q.hi_ns) + '</td></tr>');
    const packets = d.packets !== undefined ? count(d.packets) + ' packets' : count(d.pairs || 0) + ' pairs';
    return '<p class="muted">' + esc(what) + '; ' + packets + '; min ' + us(d.min_ns) + ' µs, max ' + us(d.max_ns) + ' µs; relative accuracy ' +
      fixed(100 * (d.relative_accuracy || 0), 1) + '%</p>' + (d.note ? '<p class="warn">' + esc(d.note) + '</p>' : '') +
      (rows.length ? '<table><thead><tr><th class="num">quantile</th><th class="num">µs</th><th class="num">interval µs</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>' : '');
  }

  // ---- flows ----

  const ORDERS = { ORDER_PACKETS: 'packets', ORDER_MEAN_DELAY: 'mean delay', ORDER_LOSS: 'loss' };

  async function flowsView(r, g) {
    const path = r.arg, base = '#/flows/' + enc(path);
    const order = ORDERS[r.params.get('order')] ? r.params.get('order') : 'ORDER_PACKETS';
    const rg = { from: r.params.get('from') || undefined, to: r.params.get('to') || undefined };
    const [paths, probes, top] = await Promise.all([api('ListPaths', {}), settle(api('ListProbes', {})), settle(api('TopFlows', { path, order_by: order, limit: 50, from: rg.from, to: rg.to }))]);
    if (g !== gen) return;
    const cfg = (paths.paths || []).find((p) => p.name === path) || { upstream: '', downstream: '' };
    const orders = Object.entries(ORDERS).map(([k, v]) => (k === order ? '<b>' + v + '</b>' : link(base + '?order=' + k, v))).join(' · ');
    view.innerHTML = '<h2>Top flows of ' + link('#/path/' + enc(path), path) + ' <small>TopFlows over ' + (rg.from || rg.to ? esc((rg.from || '…') + ' to ' + (rg.to || '…')) : 'every retained epoch') + '</small></h2>' +
      '<p>order by ' + orders + '. Click a flow for its history.</p><div class="row"><div id="top" class="scroll"></div><div id="side">' +
      '<div id="flow-history"></div><h2>COLATE: any flow between any two probes <small>GetFlowLatencyHistoric</small></h2>' + colateForm(cfg, probes) +
      '<div id="colate-result"></div></div></div>';
    const list = top instanceof Error ? null : top.flows || [];
    document.getElementById('top').innerHTML = top instanceof Error ? box(explain(top, 'top flows'), true) : flowsTable(list);
    bindColateForm();
    if (list) bindFlowClicks(path, list, cfg, rg, g);
    done(g);
  }

  function flowsTable(flows) {
    if (!flows.length) {
      return box('No top flow in this range: the probes report their heaviest flows per epoch, and the collector keeps per-flow results for flows.retention (1 h by default). COLATE below answers for any flow.');
    }
    const rows = flows.map((f, i) => '<tr class="clickable" data-i="' + i + '" data-flow="' + esc(flowKey(f.flow)) + '"><td>' + esc(flowText(f.flow)) + '</td><td class="num">' +
      count(f.packets || 0) + '</td><td class="num">' + count(f.lost || 0) + '</td><td class="num">' + pct(f.lost, f.packets) + '</td><td class="num">' +
      (f.estimated ? us(f.mean_ns) : '—') + '</td><td class="num">' + count(f.samples || 0) + '</td><td class="num">' + count(f.epochs || 0) + '</td></tr>');
    return '<table id="flows"><thead><tr><th>flow</th><th class="num">packets</th><th class="num">lost</th><th class="num">loss</th><th class="num">mean µs</th>' +
      '<th class="num">samples</th><th class="num">epochs</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>';
  }

  function bindFlowClicks(path, flows, cfg, rg, g) {
    const table = document.getElementById('flows');
    if (!table) return;
    table.addEventListener('click', async (e) => {
      const tr = e.target.closest('tr[data-i]');
      if (!tr) return;
      for (const x of table.querySelectorAll('tr.selected')) x.classList.remove('selected');
      tr.classList.add('selected');
      const f = flows[Number(tr.dataset.i)].flow || {};
      fillColateForm(f, cfg);
      await flowHistory(path, f, rg, g);
    });
  }

  async function flowHistory(path, flow, rg, g) {
    const el = document.getElementById('flow-history');
    for (const u of flowCharts.splice(0)) dropChart(u);
    el.innerHTML = '<p class="muted">loading the history of ' + esc(flowText(flow)) + '…</p>';
    let ans;
    try {
      ans = await api('GetFlowStats', { path, flow, from: rg.from, to: rg.to, limit: 10000 });
    } catch (err) {
      if (g === gen) el.innerHTML = box(explain(err, 'flow history'), true);
      return;
    }
    if (g !== gen) return;
    const stats = ans.stats || [];
    el.innerHTML = '<h2>' + esc(flowText(flow)) + ' <small>GetFlowStats: ' + count(stats.length) + ' epochs</small></h2><div class="chart" id="c-flow"></div><div class="chart" id="c-flow-pk"></div>';
    if (!stats.length) {
      el.innerHTML += box('no epoch of this path holds the flow in its retained sketches');
      return;
    }
    const t = stats.map((s) => Date.parse(s.start) / 1000);
    const mean = stats.map((s) => (s.estimated ? (num(s.mean_ns) || 0) / 1000 : null));
    const opts = (title, height) => ({ title, height, tzDate: utcDate, padding: timePadding, axes: [timeAxis(), {}], cursor: { drag: { x: true, y: false }, sync: { key: 'owl-flow' } } });
    const w = el.clientWidth - 8;
    flowCharts.push(chart(document.getElementById('c-flow'), Object.assign(opts('mean one-way delay (µs)', 200), {
      series: [timeSeries(), line('mean', COLORS.blue, (v) => us(v * 1000) + ' µs')],
    }), [t, mean], w));
    flowCharts.push(chart(document.getElementById('c-flow-pk'), Object.assign(opts('packets and lost', 150), {
      series: [timeSeries(), line('packets', COLORS.green, count), line('lost', COLORS.red, count)],
    }), [t, stats.map((s) => num(s.packets) || 0), stats.map((s) => num(s.lost) || 0)], w));
  }
  let flowCharts = []; // the charts of the flow shown

  function colateForm(cfg, probes) {
    const ids = probes instanceof Error ? [] : (probes.probes || []).map((p) => p.probe_id);
    const opts = ids.map((id) => '<option value="' + esc(id) + '">').join('');
    const field = (name, label, value, cls) => '<label>' + label + '<input name="' + name + '" value="' + esc(value || '') + '"' + (cls ? ' class="' + cls + '"' : '') + '></label>';
    return '<form class="inline" id="colate-form"><datalist id="probe-ids">' + opts + '</datalist>' +
      '<label>upstream probe<input name="upstream" list="probe-ids" value="' + esc(cfg.upstream) + '" required></label>' +
      '<label>downstream probe<input name="downstream" list="probe-ids" value="' + esc(cfg.downstream) + '" required></label>' +
      field('src', 'source address', '', 'wide') + field('src_port', 'source port', '', 'port') + field('dst', 'destination address', '', 'wide') +
      field('dst_port', 'destination port', '', 'port') + field('protocol', 'protocol', '6', 'port') +
      field('from', 'from (RFC3339, optional)', '', 'wide') + field('to', 'to', '', 'wide') +
      '<label>estimator<select name="estimator"><option value="">robust (default)</option><option value="paper">paper</option></select></label>' +
      '<button>query</button></form>';
  }

  function fillColateForm(f, cfg) {
    const form = document.getElementById('colate-form');
    form.elements.src.value = f.src || '';
    form.elements.dst.value = f.dst || '';
    form.elements.src_port.value = f.src_port || 0;
    form.elements.dst_port.value = f.dst_port || 0;
    form.elements.protocol.value = f.protocol || 0;
    if (cfg.upstream) form.elements.upstream.value = cfg.upstream;
    if (cfg.downstream) form.elements.downstream.value = cfg.downstream;
  }

  function bindColateForm() {
    const form = document.getElementById('colate-form');
    const g = gen;
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const v = (k) => form.elements[k].value.trim();
      const req = {
        upstream: v('upstream'), downstream: v('downstream'),
        flow: { src: v('src'), dst: v('dst'), src_port: Number(v('src_port')) || 0, dst_port: Number(v('dst_port')) || 0, protocol: Number(v('protocol')) || 0 },
        from: v('from') || undefined, to: v('to') || undefined, estimator: v('estimator') || undefined,
      };
      const out = document.getElementById('colate-result');
      out.innerHTML = '<p class="muted">asking…</p>';
      try {
        const ans = await api('GetFlowLatencyHistoric', req);
        if (g === gen) out.innerHTML = colateResult(ans);
      } catch (err) {
        if (g === gen) out.innerHTML = box(explain(err, 'COLATE query'), true);
      }
    });
  }

  function colateResult(a) {
    const kv = [
      ['mean', us(a.mean_ns) + ' µs ± ' + us(a.half_width_ns) + ' µs (probability ' + fixed(a.alpha || 0, 3) + ' of being within ' + fixed(100 * (a.beta || 0), 0) + '% of the truth)'],
      ['standard deviation', us(a.stddev_ns) + ' µs over ' + count(a.stddev_epochs || 0) + ' epochs'],
      ['packets', count(a.packets || 0) + ' upstream, ' + count(a.downstream_packets || 0) + ' downstream (' + esc(a.packet_count_source || '?') + ')'],
      ['vectors', count(a.vectors || 0) + ', ' + esc(utc(a.first)) + ' to ' + esc(utc(a.last))],
      ['estimator', esc(a.estimator || '') + '; counters left out ' + count(a.left_out_counters || 0) + ', unpaired epochs ' + count(a.unpaired_epochs || 0)],
      ['storage', fixed(a.bits_per_packet || 0, 2) + ' bits per packet'],
    ];
    return (a.note ? box(a.note) : '') + '<dl class="kv" id="colate-answer">' + kv.map(([k, v]) => '<dt>' + k + '</dt><dd>' + v + '</dd>').join('') + '</dl>';
  }

  // ---- one probe ----

  async function probeView(r, g) {
    const id = r.arg;
    const [probes, all, top, reo, vecs] = await Promise.all([
      settle(api('ListProbes', {})),
      settle(api('GetRTTDistribution', { probe: id, quantiles: RTT_QUANTILES })),
      settle(api('TopRTTPrefixes', { probe: id, limit: 20 })),
      settle(api('ListReorderedPrefixes', { probe: id, limit: 50 })),
      settle(api('ListColateVectors', { probe_id: id, limit: 1 })),
    ]);
    if (g !== gen) return;
    const info = probes instanceof Error ? null : (probes.probes || []).find((p) => p.probe_id === id);
    view.innerHTML = '<h2>Probe ' + esc(id) + '</h2>' + probeInfo(info, probes) +
      '<h2>Round-trip times <small>GetRTTDistribution by kind, all retained epochs</small></h2><div id="rtt-q"></div><div id="rtt-cdf"></div>' +
      '<h2>Worst responder prefixes <small>TopRTTPrefixes by p99</small></h2><div id="rtt-prefixes-box"></div>' +
      '<h2>Reordered prefixes <small>ListReorderedPrefixes, worst rate first</small></h2><div id="reordered-box"></div>' +
      '<h2>COLATE vectors</h2><div id="colate-box"></div>';
    await drawRTT(id, all, g);
    if (g !== gen) return;
    document.getElementById('rtt-prefixes-box').innerHTML = top instanceof Error ? box(explain(top, 'RTT prefixes'), true) : rttPrefixes(top);
    document.getElementById('reordered-box').innerHTML = reo instanceof Error ? box(explain(reo, 'reordering'), true) : reordered(reo);
    document.getElementById('colate-box').innerHTML = vecs instanceof Error ? box(explain(vecs, 'COLATE vectors'), true) : colateVectors(vecs);
    done(g);
  }

  function probeInfo(p, probes) {
    if (probes instanceof Error) return box(explain(probes, 'probes'), true);
    if (!p) return box('The probe has not connected to this collector (or its cluster) since the collector started; below is what is stored of it, if anything.');
    const state = p.error ? '<span class="bad">rejected: ' + esc(p.error) + '</span>' : p.connected ? '<span class="ok">connected</span>' : '<span class="warn">disconnected</span>';
    return '<dl class="kv"><dt>state</dt><dd>' + state + '</dd><dt>clock</dt><dd>' + probeClock(p.clock) + '</dd><dt>reports</dt><dd>' + count(p.reports || 0) +
      ' (refused ' + count(p.refused || 0) + ')</dd><dt>last seen</dt><dd>' + esc(utc(p.last_seen)) + '</dd><dt>address</dt><dd>' + esc(p.address || '—') +
      '</dd><dt>identity</dt><dd>' + esc(p.identity || '—') + '</dd><dt>version</dt><dd>' + esc(p.version || '—') + '</dd></dl>';
  }

  // drawRTT draws the CDF of each kind of round-trip time, at points spread
  // (log) between the smallest and largest of all kinds.
  async function drawRTT(id, all, g) {
    const cdfEl = document.getElementById('rtt-cdf'), qEl = document.getElementById('rtt-q');
    window.owlRTTCDF = {};
    if (all instanceof Error) {
      cdfEl.innerHTML = box(explain(all, 'round-trip times'), true);
      return;
    }
    if (!(num(all.pairs) > 0)) {
      cdfEl.innerHTML = box((all.note ? all.note + ': ' : '') + 'a probe measures round-trip times with rtt.enabled (its default), from the request/response traffic it sees: TCP data and its ACK, SYN and SYN/ACK, DNS queries and answers.');
      return;
    }
    const grid = cdfGrid(num(all.min_ns) || 1, num(all.max_ns) || 1, CDF_POINTS, true);
    const answers = await Promise.all(KINDS.map((kind) => settle(api('GetRTTDistribution', { probe: id, kind, quantiles: RTT_QUANTILES, cdf_at_ns: grid }))));
    if (g !== gen) return;
    const series = [{ label: 'µs', value: (u, v) => (v === null ? '—' : us(v * 1000)) }], data = [grid.map((x) => x / 1000)];
    const colors = [COLORS.blue, COLORS.red, COLORS.green];
    const rows = [rttRow('all kinds', all)];
    KINDS.forEach((kind, i) => {
      const a = answers[i];
      rows.push(rttRow(kind, a));
      if (a instanceof Error || !(num(a.pairs) > 0)) return;
      const pts = (a.cdf || []).map((p) => [num(p.at_ns) || 0, num(p.fraction) || 0]);
      window.owlRTTCDF[kind] = pts;
      series.push(line(kind, colors[i], (v) => fixed(v, 4)));
      data.push(pts.map((p) => p[1]));
    });
    const summary = '<table id="rtt-kinds"><thead><tr><th>kind</th><th class="num">samples</th><th class="num">pairs</th><th class="num">min µs</th>' +
      RTT_QUANTILES.map((q) => '<th class="num">p' + q * 100 + ' µs</th>').join('') + '<th class="num">max µs</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>' +
      '<p class="muted">' + count(all.epochs || 0) + ' reports; quantiles within ' + fixed(100 * (all.relative_accuracy || 0), 1) + '% (the sketch\'s accuracy)</p>' + (all.note ? '<p class="warn">' + esc(all.note) + '</p>' : '');
    qEl.innerHTML = summary;
    chart(cdfEl, {
      title: 'CDF of round-trip times (µs, log)', height: 280,
      scales: { x: { time: false, distr: 3 } }, cursor: { drag: { x: true, y: false } }, series,
    }, data, 720);
  }

  const RTT_QUANTILES = [0.5, 0.9, 0.99, 0.999];

  // rttRow is a kind's line of the RTT table: its counts and quantiles,
  // or why it has none.
  function rttRow(kind, a) {
    const head = '<tr data-kind="' + esc(kind) + '"><td>' + esc(kind) + '</td>';
    if (a instanceof Error) return head + '<td colspan="' + (RTT_QUANTILES.length + 4) + '" class="bad">' + esc(explain(a, kind)) + '</td></tr>';
    if (!(num(a.pairs) > 0)) return head + '<td colspan="' + (RTT_QUANTILES.length + 4) + '" class="muted">none in the range</td></tr>';
    const qs = RTT_QUANTILES.map((q) => {
      const x = (a.quantiles || []).find((d) => Math.abs((d.q || 0) - q) < 1e-9);
      return '<td class="num"' + (x ? ' title="' + us(x.lo_ns) + ' – ' + us(x.hi_ns) + ' µs"' : '') + '>' + (x ? us(x.value_ns) : '—') + '</td>';
    });
    return head + '<td class="num">' + count(a.samples || 0) + '</td><td class="num">' + count(a.pairs || 0) + '</td><td class="num">' + us(a.min_ns) + '</td>' + qs.join('') +
      '<td class="num">' + us(a.max_ns) + '</td></tr>';
  }

  function rttPrefixes(a) {
    const ps = a.prefixes || [];
    if (!ps.length) return box((a.note ? a.note + ': ' : '') + 'no responder prefix with round-trip times in the range');
    const rows = ps.map((p) => '<tr data-prefix="' + esc(p.prefix) + '"><td>' + esc(p.prefix) + '</td><td class="num">' + us(p.p50_ns) + '</td><td class="num">' + us(p.p99_ns) +
      '</td><td class="num">' + count(p.samples || 0) + '</td><td class="num">' + count(p.pairs || 0) + '</td></tr>');
    return '<table id="rtt-prefixes"><thead><tr><th>prefix</th><th class="num">p50 µs</th><th class="num">p99 µs</th><th class="num">samples</th><th class="num">pairs</th></tr></thead><tbody>' +
      rows.join('') + '</tbody></table>' + (a.other_pairs ? '<p class="muted">other prefixes: ' + count(a.other_pairs) + ' pairs</p>' : '') + (a.note ? '<p class="warn">' + esc(a.note) + '</p>' : '');
  }

  function reordered(a) {
    const ps = a.prefixes || [];
    if (!ps.length) {
      const why = a.note || (num(a.epochs) > 0 ? 'no prefix passed the filters in ' + count(a.epochs) + ' reports' : 'no reordering report');
      return box(why + ': a probe tracks TCP reordering by prefix with reorder.enabled, in every TCP flow it sees.');
    }
    const rows = ps.map((p) => '<tr data-prefix="' + esc(p.prefix) + '"><td>' + esc(p.prefix) + '</td><td class="num">' + pct(p.reordered, p.packets) + '</td><td class="num">±' +
      fixed(100 * (p.rate_se || 0), 3) + '%</td><td class="num">' + count(p.reordered || 0) + '</td><td class="num">' + count(p.retransmitted || 0) + '</td><td class="num">' +
      count(p.packets || 0) + '</td><td class="num">' + count(p.flows || 0) + '</td><td class="num">' + count(p.epochs || 0) + '</td></tr>');
    const total = a.total ? '<p class="muted">all prefixes: ' + pct(a.total.reordered, a.total.packets) + ' of ' + count(a.total.packets || 0) + ' packets reordered over ' + count(a.epochs || 0) + ' reports; ' +
      count(a.matched || 0) + ' prefixes matched</p>' : '';
    return total + '<table id="reordered"><thead><tr><th>prefix</th><th class="num">rate</th><th class="num">s.e.</th><th class="num">reordered</th><th class="num">retransmitted</th>' +
      '<th class="num">packets</th><th class="num">flows</th><th class="num">epochs</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>' + (a.note ? '<p class="warn">' + esc(a.note) + '</p>' : '');
  }

  function colateVectors(a) {
    const v = (a.vectors || [])[0];
    if (!v) return box('no COLATE vector of this probe is stored: COLATE is on with params.colate.enabled, on every probe');
    return '<p>latest vector: epoch ' + esc(v.epoch || 0) + ' (' + esc(utc(v.start)) + '), ' + count(v.packets || 0) + ' packets, ' + count(v.flows || 0) + ' flows, ' +
      fixed(v.bits_per_packet || 0, 2) + ' bits per packet' + (v.overflowed ? ', <span class="warn">overflowed</span>' : '') + '. Query flows from a path\'s flows page.</p>';
  }

  window.addEventListener('hashchange', route);
  route();
})();
