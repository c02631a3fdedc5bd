// Usage over time as bars (SVG drawn here: two small charts do not warrant a charting library).
import type { UsageRollup } from '@svc/client';

export function BarChart({ title, rollups, value, unit }: { title: string; rollups: UsageRollup[]; value: (r: UsageRollup) => number; unit: string }) {
  const width = 320;
  const height = 90;
  const values = rollups.map(value);
  const max = Math.max(...values, 0);
  const barWidth = rollups.length > 0 ? width / rollups.length : width;
  const last = values.at(-1);
  return (
    <figure className="chart">
      <figcaption>
        {title}: {last === undefined ? 'no samples yet' : `${last.toFixed(2)} ${unit} in the last hour, at most ${max.toFixed(2)}`}
      </figcaption>
      <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-label={`${title} per hour`} preserveAspectRatio="none">
        {values.map((v, i) => {
          const h = max > 0 ? (v / max) * (height - 4) : 0;
          return <rect key={rollups[i]?.start ?? i} x={i * barWidth + 1} y={height - h} width={Math.max(barWidth - 2, 1)} height={h} />;
        })}
      </svg>
    </figure>
  );
}
